// Whether a pointer is CUDA device memory, for code built without CUDA headers (the
// collectives' argument checks). Always false in a build without CUDA, and on a machine
// where the CUDA runtime cannot start (it is asked once).
#pragma once

namespace gw {

bool is_device_memory(const void* p);

}  // namespace gw
