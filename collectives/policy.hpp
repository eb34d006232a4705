#pragma once

#include <cstddef>

#include "gradwire/codec.hpp"
#include "gradwire/communicator.hpp"

namespace gw::coll {

struct PolicyInput {
  size_t count;
  DType dtype;
  const Codec* codec;
  int nranks;
  Algo requested;   // per call
  Algo configured;  // GW_ALGO
  size_t dense_threshold_bytes;
};

Algo choose_allreduce(const PolicyInput& in);

}  // namespace gw::coll
