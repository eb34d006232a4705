// Faults that only tests inject, to show that a test catches them: a GPU test that passes
// whether or not the code under test waits for the caller's stream proves nothing about that
// wait. Hidden symbols, absent from libgradwire.so's interface; the test binaries link
// gw_internal statically and set them. Default off; nothing outside tests/ sets them.
#pragma once

#include <atomic>

namespace gw::kern::testing_hooks {

// The CUDA backend's begin() skips its wait for the caller's stream (the event recorded there
// and cudaStreamWaitEvent), so a device collective may read inputs still being written.
// tests/gpu/test_device_collectives_gpu.cpp, MissingCallerWaitIsCaught.
extern std::atomic<bool> skip_caller_wait __attribute__((visibility("hidden")));

}  // namespace gw::kern::testing_hooks
