// Whether a pointer is CUDA device memory that the CPU cannot read, for the host-side calls
// (codecs on host memory, the collectives) to refuse it with a message instead of crashing.
// Asks the CUDA driver only if the process has already loaded and initialised it (so it
// never loads or initialises CUDA itself, and costs one symbol lookup where CUDA is absent);
// works in builds without CUDA. Managed memory is host-readable and is not reported.
#pragma once

namespace gw {

bool is_device_memory(const void* p);

}  // namespace gw
