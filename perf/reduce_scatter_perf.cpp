// reduce_scatter_perf: gradwire's reduce-scatter (gw_reduce_scatterv) timed like nccl-tests'
// reduce_scatter_perf: size is each rank's whole input (every block), in the input type; a
// rank's block is count / p elements (the first count % p one longer); busbw = algbw *
// (p-1)/p. The dense reference row is the ring reduce-scatter FSDP calls by default
// (gw_reduce_scatter; raw gw_reduce_scatterv where the blocks are uneven); every --codec row
// is gw_reduce_scatterv with that codec, each contribution encoded once and summed by its
// owner in float32, with an EF state over the whole input when the spec says ef=1. relerr
// compares this rank's block with the exact sum of the inputs; lossless rows are also
// checked bit for bit on small integers.
#include <cmath>
#include <string>
#include <vector>

#include "perf/data.hpp"
#include "perf/driver.hpp"
#include "perf/launch.hpp"

namespace {

using gw::perf::Case;
void must(gw_result_t r, const char* where) { gw::perf::check(r, where); }

class ReduceScatter final : public gw::perf::Collective {
 public:
  double bus_factor(int p) const override { return static_cast<double>(p - 1) / p; }
  const char* fixed_algo() const override { return "direct"; }

  std::string unsupported(const Case& c) const override {
    if (c.op != GW_SUM && c.op != GW_AVG) return "a compressed reduce-scatter sums or averages";
    return "";
  }

  void allocate(const Case& l) override {
    const size_t es = gw::perf::elem_size(l.dtype);
    grad_.assign(l.count * es + 1, 0);
    ints_.assign(l.count * es + 1, 0);
    recv_.assign(l.count * es + 1, 0);
    for (size_t i = 0; i < l.count; ++i) {
      gw::perf::store(grad_.data(), i, gw::perf::grad_value(i, l.rank), l.dtype);
      gw::perf::store(ints_.data(), i, gw::perf::int_value(i, l.rank), l.dtype);
    }
  }

  void prepare(const Case& c) override {
    counts_.assign(static_cast<size_t>(c.nranks), 0);
    start_ = 0;
    for (int r = 0; r < c.nranks; ++r) {
      counts_[r] = c.count / static_cast<size_t>(c.nranks) + (static_cast<size_t>(r) < c.count % c.nranks ? 1 : 0);
      if (r < c.rank) start_ += counts_[r];
    }
    ef_ = nullptr;
    if (c.ef) must(gw_ef_state_create(c.count, &ef_), "gw_ef_state_create");
  }

  void run(const Case& c) override { call(c, grad_.data()); }

  gw::perf::Check check(const Case& c, gw_algo_t) override {
    gw::perf::Check out;
    if (ef_ != nullptr) must(gw_ef_state_reset(ef_), "gw_ef_state_reset");
    run(c);
    const size_t mine = counts_[c.rank];
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < mine; ++i) {
      double s = 0;
      for (int r = 0; r < c.nranks; ++r) s += gw::perf::as_sent(gw::perf::grad_value(start_ + i, r), c.dtype);
      if (c.op == GW_AVG) s /= c.nranks;
      const double d = gw::perf::load(recv_.data(), i, c.dtype) - s;
      err2 += d * d;
      ref2 += s * s;
    }
    out.relerr = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
    if (c.lossless) {
      if (ef_ != nullptr) must(gw_ef_state_reset(ef_), "gw_ef_state_reset");
      call(c, ints_.data());
      out.wrong = 0;
      for (size_t i = 0; i < mine; ++i) {
        float s = 0;
        for (int r = 0; r < c.nranks; ++r) s += gw::perf::int_value(start_ + i, r);
        if (c.op == GW_AVG) s /= static_cast<float>(c.nranks);
        if (gw::perf::load(recv_.data(), i, c.dtype) != gw::perf::as_sent(s, c.dtype)) ++out.wrong;
      }
    }
    return out;
  }

  bool dense_reference() const override { return true; }

  void release(const Case&) override {
    if (ef_ != nullptr) must(gw_ef_state_destroy(ef_), "gw_ef_state_destroy");
    ef_ = nullptr;
  }

 private:
  void call(const Case& c, const uint8_t* in) {
    if (c.reference) {  // the dense ring FSDP's default reduce-scatter is
      if (c.count % static_cast<size_t>(c.nranks) == 0) {
        must(gw_reduce_scatter(c.comm, in, recv_.data(), counts_[0], c.dtype, c.op), "gw_reduce_scatter");
      } else {
        must(gw_reduce_scatterv(c.comm, in, recv_.data(), counts_.data(), c.dtype, c.op, nullptr, nullptr),
             "gw_reduce_scatterv");
      }
      return;
    }
    must(gw_reduce_scatterv(c.comm, in, recv_.data(), counts_.data(), c.dtype, c.op, c.codec, ef_),
         "gw_reduce_scatterv");
  }

  std::vector<uint8_t> grad_, ints_, recv_;
  std::vector<size_t> counts_;
  size_t start_ = 0;
  gw_ef_state_t ef_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  ReduceScatter coll;
  return gw::perf::run_driver(argc, argv, "reduce_scatter_perf", coll);
}
