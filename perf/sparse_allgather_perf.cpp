// sparse_allgather_perf: gradwire's sparse all-gather (gw_sparse_allgather_dense: every
// rank's compressed message to every rank, decoded and summed in rank order) timed like
// nccl-tests' all_gather_perf. As there, size is the gathered total: count elements per
// rank times the ranks, in the uncompressed type; busbw = algbw * (p-1)/p. Each rank's
// message is its gradient-like input (perf/data.hpp) encoded once with --codec (default
// topk:ratio=0.01) before timing, so only the collective is timed. #wrong counts elements
// that differ from the rank-order sum of every rank's decoded message (recomputed here);
// relerr compares the result with the exact sum of the uncompressed inputs.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "perf/data.hpp"
#include "perf/driver.hpp"
#include "perf/launch.hpp"

namespace {

using gw::perf::Case;
// Exits with the library's message when r is not GW_SUCCESS.
void must(gw_result_t r, const char* where) { gw::perf::check(r, where); }

class SparseAllgather final : public gw::perf::Collective {
 public:
  double bus_factor(int p) const override { return static_cast<double>(p - 1) / p; }
  const char* fixed_algo() const override { return "direct"; }

  size_t count_for(size_t bytes, size_t elem, int nranks) const override {
    return bytes / elem / static_cast<size_t>(nranks);
  }

  std::string unsupported(const Case& c) const override {
    if (c.dtype != GW_FLOAT32) return "sparse all-gather takes float32";
    return "";
  }

  void allocate(const Case& l) override {
    grad_.assign(l.count + 1, 0.0f);
    dense_.assign(l.count + 1, 0.0f);
    ref_.assign(l.count + 1, 0.0f);
    exact_.assign(l.count, 0.0);
    for (size_t i = 0; i < l.count; ++i) {
      double s = 0;
      for (int r = 0; r < l.nranks; ++r) s += gw::perf::grad_value(i, r);
      exact_[i] = s;
    }
  }

  void prepare(const Case& c) override {
    size_t cap = 0;
    must(gw_codec_max_encoded_bytes(c.codec, c.count, GW_FLOAT32, &cap), "gw_codec_max_encoded_bytes");
    if (msg_.size() < cap) msg_.assign(cap, 0);
    if (other_.size() < cap) other_.assign(cap, 0);
    // The reference: every rank's message, decoded and summed in rank order.
    std::memset(ref_.data(), 0, c.count * sizeof(float));
    for (int r = 0; r < c.nranks; ++r) {
      for (size_t i = 0; i < c.count; ++i) grad_[i] = gw::perf::grad_value(i, r);
      size_t len = 0;
      uint8_t* out = r == c.rank ? msg_.data() : other_.data();
      must(gw_encode(c.codec, grad_.data(), c.count, GW_FLOAT32, 0, static_cast<uint32_t>(r), nullptr, out, cap, &len),
           "gw_encode");
      if (r == c.rank) len_ = len;
      must(gw_decode(out, len, ref_.data(), c.count, GW_FLOAT32, GW_DECODE_ACCUMULATE), "gw_decode");
    }
  }

  void run(const Case& c) override {
    must(gw_sparse_allgather_dense(c.comm, msg_.data(), len_, dense_.data(), c.count), "gw_sparse_allgather_dense");
  }

  gw::perf::Check check(const Case& c, gw_algo_t) override {
    gw::perf::Check out;
    std::memset(dense_.data(), 0xff, c.count * sizeof(float));  // a call that writes nothing fails
    run(c);
    double err2 = 0, ref2 = 0;
    out.wrong = 0;
    for (size_t i = 0; i < c.count; ++i) {
      if (std::memcmp(&dense_[i], &ref_[i], sizeof(float)) != 0) ++out.wrong;
      const double d = dense_[i] - exact_[i];
      err2 += d * d;
      ref2 += exact_[i] * exact_[i];
    }
    out.relerr = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
    return out;
  }

 private:
  std::vector<float> grad_, dense_, ref_;
  std::vector<double> exact_;
  std::vector<uint8_t> msg_, other_;
  size_t len_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  // The default codec of this tool is a sparse one.
  std::vector<char*> args(argv, argv + argc);
  bool has_codec = false;
  for (int i = 1; i < argc; ++i) has_codec = has_codec || std::strcmp(argv[i], "--codec") == 0;
  static char flag[] = "--codec", spec[] = "topk:ratio=0.01";
  if (!has_codec) {
    args.push_back(flag);
    args.push_back(spec);
  }
  SparseAllgather coll;
  return gw::perf::run_driver(static_cast<int>(args.size()), args.data(), "sparse_allgather_perf", coll);
}
