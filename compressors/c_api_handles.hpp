// What the C ABI's opaque codec and EF-state handles hold.
#pragma once

#include <memory>

#include "gradwire/codec.hpp"
#include "gradwire/ef_state.hpp"

struct gw_codec_s {
  std::unique_ptr<gw::Codec> codec;
};

struct gw_ef_state_s {
  gw::ErrorFeedback ef;
  explicit gw_ef_state_s(size_t count) : ef(count) {}
};
