#include "perf/codec_bench.hpp"

int main(int argc, char** argv) { return gw::perf::codec_bench_main(argc, argv); }
