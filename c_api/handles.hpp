// What the C ABI's opaque codec and EF-state handles hold.
#pragma once

#include <memory>

#include "compressors/device_ef_state.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/ef_state.hpp"

struct gw_codec_s {
  std::unique_ptr<gw::Codec> codec;
  // The codec's device encoder and its scratch (kernels/), made by the first gw_encode_device.
  std::shared_ptr<void> device;
};

struct gw_ef_state_s {
  gw::ErrorFeedback ef;
  // Set for a state made by gw_ef_state_create_device; ef is then empty.
  std::unique_ptr<gw::DeviceEfState> device;
  explicit gw_ef_state_s(size_t count) : ef(count) {}
};
