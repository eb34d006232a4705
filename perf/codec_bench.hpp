// codec_bench as a function, so that a test can run it in its own process (with the codecs the
// test registers). Exits the process on bad arguments (status 2) or a failed codec call.
#pragma once

namespace gw::perf {

// Runs codec_bench with argv as on its command line; returns its exit status.
int codec_bench_main(int argc, char** argv);

}  // namespace gw::perf
