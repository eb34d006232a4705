// allgather_compressed_perf: gradwire's all-gather on a compressed wire (gw_allgather_compressed,
// quantized weights as FSDP's parameter all-gather or ZeRO++'s qwZ) timed like nccl-tests'
// all_gather_perf: size is the gathered buffer (every rank's block), a rank's block size /
// p; busbw = algbw * (p-1)/p. The dense reference row is the raw all-gather (gw_allgather);
// every --codec row is gw_allgather_compressed with that codec. relerr compares the gathered
// buffer with every rank's exact input; lossless rows are also checked bit for bit on small
// integers.
#include <cmath>
#include <string>
#include <vector>

#include "perf/data.hpp"
#include "perf/driver.hpp"
#include "perf/launch.hpp"

namespace {

using gw::perf::Case;
void must(gw_result_t r, const char* where) { gw::perf::check(r, where); }

class AllgatherCompressed final : public gw::perf::Collective {
 public:
  double bus_factor(int p) const override { return static_cast<double>(p - 1) / p; }
  const char* fixed_algo() const override { return "ring"; }
  size_t count_for(size_t bytes, size_t elem, int nranks) const override {
    return bytes / elem / static_cast<size_t>(nranks);
  }

  void allocate(const Case& l) override {
    const size_t es = gw::perf::elem_size(l.dtype);
    const size_t all = l.count * static_cast<size_t>(l.nranks);
    weights_.assign(l.count * es + 1, 0);
    ints_.assign(l.count * es + 1, 0);
    recv_.assign(all * es + 1, 0);
    for (size_t i = 0; i < l.count; ++i) {
      gw::perf::store(weights_.data(), i, gw::perf::grad_value(i, l.rank), l.dtype);
      gw::perf::store(ints_.data(), i, gw::perf::int_value(i, l.rank), l.dtype);
    }
  }

  void prepare(const Case&) override {}

  void run(const Case& c) override { call(c, weights_.data()); }

  gw::perf::Check check(const Case& c, gw_algo_t) override {
    gw::perf::Check out;
    run(c);
    double err2 = 0, ref2 = 0;
    for (int r = 0; r < c.nranks; ++r) {
      for (size_t i = 0; i < c.count; ++i) {
        const double want = gw::perf::as_sent(gw::perf::grad_value(i, r), c.dtype);
        const double d = gw::perf::load(recv_.data(), static_cast<size_t>(r) * c.count + i, c.dtype) - want;
        err2 += d * d;
        ref2 += want * want;
      }
    }
    out.relerr = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
    if (c.lossless) {
      call(c, ints_.data());
      out.wrong = 0;
      for (int r = 0; r < c.nranks; ++r) {
        for (size_t i = 0; i < c.count; ++i) {
          const double want = gw::perf::as_sent(gw::perf::int_value(i, r), c.dtype);
          if (gw::perf::load(recv_.data(), static_cast<size_t>(r) * c.count + i, c.dtype) != want) ++out.wrong;
        }
      }
    }
    return out;
  }

  bool dense_reference() const override { return true; }

 private:
  void call(const Case& c, const uint8_t* in) {
    if (c.reference) {
      must(gw_allgather(c.comm, in, recv_.data(), c.count * gw::perf::elem_size(c.dtype)), "gw_allgather");
      return;
    }
    must(gw_allgather_compressed(c.comm, in, recv_.data(), c.count, c.dtype, c.codec), "gw_allgather_compressed");
  }

  std::vector<uint8_t> weights_, ints_, recv_;
};

}  // namespace

int main(int argc, char** argv) {
  AllgatherCompressed coll;
  return gw::perf::run_driver(argc, argv, "allgather_compressed_perf", coll);
}
