// The codec and error-feedback half of the C ABI: argument checks, then the C++ API.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c_api/handles.hpp"
#include "c_api/support.hpp"
#include "compressors/codec_registry.hpp"
#include "compressors/device_ef_state.hpp"
#include "compressors/device_memory.hpp"
#include "compressors/ef_state_blob.hpp"
#include "compressors/wire_header.hpp"
#include "gradwire/codec.hpp"
#include "gradwire/ef_state.hpp"
#include "gradwire/gradwire.h"

namespace {

using gw::Status;
using gw::capi::guard;
using gw::capi::null_arg;

// gw_encode and gw_decode read and write with the CPU: a device pointer would crash it.
Status check_host(const void* p, const char* name) {
  if (gw::is_device_memory(p)) {
    return gw::invalid_argument(std::string(name) + " is CUDA device memory: use gw_encode_device / gw_decode_device");
  }
  return Status::ok();
}

Status check_dtype(gw_dtype_t dtype) {
  if (!gw::dtype_valid(static_cast<int>(dtype))) {
    return gw::invalid_argument("dtype " + std::to_string(static_cast<int>(dtype)) + " is not a gw_dtype_t");
  }
  return Status::ok();
}

}  // namespace

namespace {

// A host or device state as the checkpoint blob sees it.
gw::EfAccess ef_access(gw_ef_state_s& s) {
  if (s.device) {
    gw::DeviceEfState* d = s.device.get();
    return gw::EfAccess{d->count(),
                        d->step(),
                        d->owner_count(),
                        [d](float* out) { return d->copy_out(out, d->count()); },
                        [d](float* out) { return d->copy_owner_out(out, d->owner_count()); },
                        [d](const float* in) { return d->copy_in(in, d->count()); },
                        [d](const float* in, size_t n) { return d->copy_owner_in(in, n); },
                        [d](uint64_t step) { d->set_step(step); }};
  }
  gw::ErrorFeedback* e = &s.ef;
  return gw::EfAccess{e->count(),
                      e->step(),
                      e->owner_count(),
                      [e](float* out) {
                        std::memcpy(out, e->residual(), e->count() * sizeof(float));
                        return Status::ok();
                      },
                      [e](float* out) {
                        std::memcpy(out, e->owner_residual(), e->owner_count() * sizeof(float));
                        return Status::ok();
                      },
                      [e](const float* in) {
                        std::memcpy(e->residual(), in, e->count() * sizeof(float));
                        return Status::ok();
                      },
                      [e](const float* in, size_t n) {
                        float* o = e->owner_residual(n);
                        if (n > 0) std::memcpy(o, in, n * sizeof(float));
                        return Status::ok();
                      },
                      [e](uint64_t step) { e->set_step(step); }};
}

}  // namespace

extern "C" {

gw_result_t gw_codec_create(const char* spec, gw_codec_t* codec) {
  return guard("gw_codec_create", [&]() -> Status {
    if (codec == nullptr) return null_arg("codec");
    *codec = nullptr;
    if (spec == nullptr) return null_arg("spec");
    GW_ASSIGN_OR_RETURN(std::unique_ptr<gw::Codec> c, gw::Codec::create(spec));
    *codec = new gw_codec_s{std::move(c), nullptr};
    return Status::ok();
  });
}

gw_result_t gw_codec_destroy(gw_codec_t codec) {
  return guard("gw_codec_destroy", [&]() -> Status {
    delete codec;
    return Status::ok();
  });
}

gw_result_t gw_codec_spec(gw_codec_t codec, char* buf, size_t capacity) {
  return guard("gw_codec_spec", [&]() -> Status {
    if (codec == nullptr) return null_arg("codec");
    if (buf == nullptr) return null_arg("buf");
    const std::string text = codec->codec->spec().to_string();
    if (capacity < text.size() + 1) {
      return gw::buffer_too_small("capacity " + std::to_string(capacity) + " is below the " +
                                  std::to_string(text.size() + 1) + " bytes the spec needs");
    }
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return Status::ok();
  });
}

gw_result_t gw_codec_id(gw_codec_t codec, gw_codec_id_t* id) {
  return guard("gw_codec_id", [&]() -> Status {
    if (codec == nullptr) return null_arg("codec");
    if (id == nullptr) return null_arg("id");
    *id = static_cast<gw_codec_id_t>(codec->codec->id());
    return Status::ok();
  });
}

size_t gw_codec_count(void) { return gw::detail::codec_count(); }

gw_result_t gw_codec_info(size_t index, gw_codec_info_t* info) {
  return guard("gw_codec_info", [&]() -> Status {
    if (info == nullptr) return null_arg("info");
    const size_t count = gw::detail::codec_count();
    if (index >= count) {
      return gw::invalid_argument("index " + std::to_string(index) +
                                  " is not below gw_codec_count() = " + std::to_string(count));
    }
    // The key lists, built once: the registry is complete before main.
    static const std::vector<std::string> keys = [count] {
      std::vector<std::string> all(count);
      for (size_t i = 0; i < count; ++i) {
        const gw::detail::CodecEntry& e = *gw::detail::codec_at(i);
        for (size_t p = 0; p < e.n_params; ++p) all[i] += (p > 0 ? "," : "") + std::string(e.params[p].key);
      }
      return all;
    }();
    const gw::detail::CodecEntry& e = *gw::detail::codec_at(index);
    info->name = e.name;
    info->id = static_cast<gw_codec_id_t>(e.id);
    info->caps = e.caps | (gw::capi::has_device_codec(static_cast<uint8_t>(e.id)) ? GW_CODEC_CAP_DEVICE : 0u);
    info->keys = index < keys.size() ? keys[index].c_str() : "";
    return Status::ok();
  });
}

gw_result_t gw_codec_max_encoded_bytes(gw_codec_t codec, size_t count, gw_dtype_t dtype, size_t* bytes) {
  return guard("gw_codec_max_encoded_bytes", [&]() -> Status {
    if (codec == nullptr) return null_arg("codec");
    if (bytes == nullptr) return null_arg("bytes");
    GW_RETURN_IF_ERROR(check_dtype(dtype));
    const size_t b = codec->codec->max_encoded_bytes(count, static_cast<gw::DType>(dtype));
    if (b == SIZE_MAX) return gw::invalid_argument("count " + std::to_string(count) + " is too large");
    *bytes = b;
    return Status::ok();
  });
}

gw_result_t gw_encode(gw_codec_t codec, const void* src, size_t count, gw_dtype_t dtype, uint64_t step, uint32_t rank,
                      gw_ef_state_t ef, void* dst, size_t capacity, size_t* written) {
  return guard("gw_encode", [&]() -> Status {
    if (codec == nullptr) return null_arg("codec");
    if (written == nullptr) return null_arg("written");
    *written = 0;
    GW_RETURN_IF_ERROR(check_dtype(dtype));
    GW_RETURN_IF_ERROR(check_host(src, "src"));
    GW_RETURN_IF_ERROR(check_host(dst, "dst"));
    const gw::EncodeContext ctx{step, rank};
    if (ef != nullptr && ef->device) {
      return gw::invalid_argument("ef lives in device memory (gw_ef_state_create_device): use gw_encode_device");
    }
    if (ef != nullptr) {
      if (dtype != GW_FLOAT32) return gw::unsupported("error feedback takes float32 input only");
      if (src == nullptr && count > 0) return null_arg("src");
      GW_ASSIGN_OR_RETURN(*written,
                          codec->codec->encode(static_cast<const float*>(src), count, ctx, ef->ef, dst, capacity));
    } else {
      GW_ASSIGN_OR_RETURN(*written,
                          codec->codec->encode(src, count, static_cast<gw::DType>(dtype), ctx, dst, capacity));
    }
    return Status::ok();
  });
}

gw_result_t gw_decode(const void* msg, size_t len, void* dst, size_t count, gw_dtype_t dtype, gw_decode_mode_t mode) {
  return guard("gw_decode", [&]() -> Status {
    if (msg == nullptr) return null_arg("msg");
    GW_RETURN_IF_ERROR(check_dtype(dtype));
    if (static_cast<int>(mode) < 0 || static_cast<int>(mode) > static_cast<int>(GW_DECODE_SUBTRACT)) {
      return gw::invalid_argument("mode " + std::to_string(static_cast<int>(mode)) + " is not a gw_decode_mode_t");
    }
    GW_RETURN_IF_ERROR(check_host(msg, "msg"));
    GW_RETURN_IF_ERROR(check_host(dst, "dst"));
    return gw::decode(msg, len, dst, count, static_cast<gw::DType>(dtype), static_cast<gw::DecodeMode>(mode));
  });
}

gw_result_t gw_message_info(const void* msg, size_t len, gw_message_info_t* info) {
  return guard("gw_message_info", [&]() -> Status {
    if (msg == nullptr) return null_arg("msg");
    if (info == nullptr) return null_arg("info");
    GW_ASSIGN_OR_RETURN(gw::MessageInfo m, gw::inspect(msg, len));
    info->codec = static_cast<gw_codec_id_t>(m.codec);
    info->dtype = static_cast<gw_dtype_t>(m.dtype);
    info->count = m.count;
    info->nnz = m.nnz;
    info->total_bytes = m.total_bytes;
    return Status::ok();
  });
}

gw_result_t gw_message_length(const void* msg, size_t len, uint64_t* total_bytes) {
  return guard("gw_message_length", [&]() -> Status {
    if (total_bytes == nullptr) return null_arg("total_bytes");
    *total_bytes = 0;
    if (msg == nullptr) return null_arg("msg");
    GW_RETURN_IF_ERROR(check_host(msg, "msg"));
    GW_ASSIGN_OR_RETURN(*total_bytes, gw::wire::stated_length(static_cast<const uint8_t*>(msg), len));
    return Status::ok();
  });
}

gw_result_t gw_ef_state_create(size_t count, gw_ef_state_t* ef) {
  return guard("gw_ef_state_create", [&]() -> Status {
    if (ef == nullptr) return null_arg("ef");
    *ef = nullptr;
    if (count > (size_t{1} << 48)) return gw::invalid_argument("count " + std::to_string(count) + " exceeds 2^48");
    *ef = new gw_ef_state_s(count);
    return Status::ok();
  });
}

gw_result_t gw_ef_state_destroy(gw_ef_state_t ef) {
  return guard("gw_ef_state_destroy", [&]() -> Status {
    delete ef;
    return Status::ok();
  });
}

gw_result_t gw_ef_state_reset(gw_ef_state_t ef) {
  return guard("gw_ef_state_reset", [&]() -> Status {
    if (ef == nullptr) return null_arg("ef");
    if (ef->device) return ef->device->reset();
    ef->ef.reset();
    return Status::ok();
  });
}

gw_result_t gw_ef_state_count(gw_ef_state_t ef, size_t* count) {
  return guard("gw_ef_state_count", [&]() -> Status {
    if (ef == nullptr) return null_arg("ef");
    if (count == nullptr) return null_arg("count");
    *count = ef->device ? ef->device->count() : ef->ef.count();
    return Status::ok();
  });
}

gw_result_t gw_ef_state_step(gw_ef_state_t ef, uint64_t* step) {
  return guard("gw_ef_state_step", [&]() -> Status {
    if (ef == nullptr) return null_arg("ef");
    if (step == nullptr) return null_arg("step");
    *step = ef->device ? ef->device->step() : ef->ef.step();
    return Status::ok();
  });
}

gw_result_t gw_ef_state_get_residual(gw_ef_state_t ef, float* out, size_t count) {
  return guard("gw_ef_state_get_residual", [&]() -> Status {
    if (ef == nullptr) return null_arg("ef");
    if (out == nullptr && count > 0) return null_arg("out");
    if (ef->device) return ef->device->copy_out(out, count);
    if (count != ef->ef.count()) {
      return gw::invalid_argument("count " + std::to_string(count) + " differs from the state's " +
                                  std::to_string(ef->ef.count()));
    }
    if (count > 0) std::memcpy(out, ef->ef.residual(), count * sizeof(float));
    return Status::ok();
  });
}

gw_result_t gw_ef_state_set_residual(gw_ef_state_t ef, const float* in, size_t count) {
  return guard("gw_ef_state_set_residual", [&]() -> Status {
    if (ef == nullptr) return null_arg("ef");
    if (in == nullptr && count > 0) return null_arg("in");
    if (ef->device) return ef->device->copy_in(in, count);
    if (count != ef->ef.count()) {
      return gw::invalid_argument("count " + std::to_string(count) + " differs from the state's " +
                                  std::to_string(ef->ef.count()));
    }
    if (count > 0) std::memcpy(ef->ef.residual(), in, count * sizeof(float));
    return Status::ok();
  });
}

gw_result_t gw_ef_state_set_step(gw_ef_state_t ef, uint64_t step) {
  return guard("gw_ef_state_set_step", [&]() -> Status {
    if (ef == nullptr) return null_arg("ef");
    if (ef->device) {
      ef->device->set_step(step);
    } else {
      ef->ef.set_step(step);
    }
    return Status::ok();
  });
}

gw_result_t gw_ef_state_save(gw_ef_state_t ef, void* buf, size_t capacity, size_t* bytes) {
  return guard("gw_ef_state_save", [&]() -> Status {
    if (ef == nullptr) return null_arg("ef");
    if (bytes == nullptr) return null_arg("bytes");
    *bytes = 0;
    const gw::EfAccess access = ef_access(*ef);
    if (buf == nullptr) {
      GW_ASSIGN_OR_RETURN(*bytes, gw::ef_blob_bytes(access));
      return Status::ok();
    }
    GW_ASSIGN_OR_RETURN(*bytes, gw::save_ef_blob(access, buf, capacity));
    return Status::ok();
  });
}

gw_result_t gw_ef_state_load(gw_ef_state_t ef, const void* buf, size_t len) {
  return guard("gw_ef_state_load", [&]() -> Status {
    if (ef == nullptr) return null_arg("ef");
    if (buf == nullptr) return null_arg("buf");
    return gw::load_ef_blob(ef_access(*ef), buf, len);
  });
}

}  // extern "C"
