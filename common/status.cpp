#include "gradwire/status.hpp"

namespace gw {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "success";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kInvalidMessage: return "invalid message";
    case Code::kUnsupported: return "unsupported";
    case Code::kOutOfMemory: return "out of memory";
    case Code::kBufferTooSmall: return "buffer too small";
    case Code::kInternal: return "internal error";
    case Code::kSystem: return "system error";
    case Code::kRemote: return "remote error";
    case Code::kTimeout: return "timeout";
    case Code::kAborted: return "aborted";
    case Code::kCuda: return "CUDA error";
    case Code::kInvalidUsage: return "invalid usage";
    case Code::kRevoked: return "revoked";
  }
  return "unknown result";
}

std::string Status::to_string() const {
  if (is_ok()) return "success";
  return std::string(code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& where) const {
  if (is_ok()) return *this;
  return Status(code_, where + ": " + message_);
}

}  // namespace gw
