// allreduce_perf: gradwire's all-reduce timed like nccl-tests' all_reduce_perf, for every
// size and every --codec in one run. size is each rank's buffer; busbw = algbw * 2(p-1)/p.
// Timed calls send a gradient-like input (perf/data.hpp); relerr compares one fresh call
// (error feedback reset) with the exact sum of that input, run with the algorithm the timed
// calls ran. Lossless rows (codec none, fp16, bf16, or any codec whose timed calls all ran
// the dense ring) are also checked bit for bit on small integers; lossy ones are not.
// With any --codec the driver adds the dense ring as a reference row ("vs dense", link
// floor). The running-sum error (--ef-steps N) runs N more calls with the codec, each rank's
// input at step s being its timed input plus fresh noise of the same distribution (a fixed
// signal, as a gradient's mean, plus minibatch noise), and compares the sum of the N results
// with the sum of the N dense results: error feedback keeps it small, without EF the
// compression error of every step stays in the sum.
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

class Allreduce final : public gw::perf::Collective {
 public:
  double bus_factor(int p) const override { return 2.0 * (p - 1) / p; }

  std::string unsupported(const Case& c) const override {
    if (!c.lossless && c.dtype != GW_FLOAT32) return "lossy codecs take float32";
    return "";
  }

  gw_algo_t policy_algo(const Case& c) const override {
    // Where the static policy compresses, the library times its candidates over a key's
    // first calls (AllreduceTuner, collectives/policy/policy.hpp) and reports its decision
    // once it has one: the driver warms up until the calls run it.
    if (c.algo != GW_ALGO_AUTO) return GW_ALGO_AUTO;
    gw_algo_t a = GW_ALGO_RING;
    must(gw_allreduce_algo(c.comm, c.count, c.dtype, c.codec, &a), "gw_allreduce_algo");
    return a;
  }

  void allocate(const Case& l) override {
    const size_t es = gw::perf::elem_size(l.dtype);
    grad_.assign(l.count * es + 1, 0);
    ints_.assign(l.count * es + 1, 0);
    recv_.assign(l.count * es + 1, 0);
    exact_.assign(l.count, 0.0);
    for (size_t i = 0; i < l.count; ++i) {
      gw::perf::store(grad_.data(), i, gw::perf::grad_value(i, l.rank), l.dtype);
      gw::perf::store(ints_.data(), i, gw::perf::int_value(i, l.rank), l.dtype);
      double s = 0;
      for (int r = 0; r < l.nranks; ++r) s += gw::perf::as_sent(gw::perf::grad_value(i, r), l.dtype);
      exact_[i] = l.op == GW_AVG ? s / l.nranks : s;
    }
  }

  void prepare(const Case& c) override {
    ef_ = nullptr;
    if (c.ef && c.dtype == GW_FLOAT32) must(gw_ef_state_create(c.count, &ef_), "gw_ef_state_create");
  }

  void run(const Case& c) override {
    must(gw_allreduce_ex(c.comm, grad_.data(), recv_.data(), c.count, c.dtype, c.op, c.codec, ef_, c.algo),
         "gw_allreduce");
  }

  gw::perf::Check check(const Case& c, gw_algo_t ran) override {
    gw::perf::Check out;
    if (ef_ != nullptr) must(gw_ef_state_reset(ef_), "gw_ef_state_reset");
    run(c);
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < c.count; ++i) {
      const double d = gw::perf::load(recv_.data(), i, c.dtype) - exact_[i];
      err2 += d * d;
      ref2 += exact_[i] * exact_[i];
    }
    out.relerr = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
    if (c.lossless || ran == GW_ALGO_RING) {
      must(gw_allreduce_ex(c.comm, ints_.data(), recv_.data(), c.count, c.dtype, c.op, c.codec, ef_, c.algo),
           "gw_allreduce");
      out.wrong = 0;
      for (size_t i = 0; i < c.count; ++i) {
        float s = 0;
        for (int r = 0; r < c.nranks; ++r) s += gw::perf::int_value(i, r);
        if (c.op == GW_AVG) s /= static_cast<float>(c.nranks);
        // The expected value rounded to the type, as the ring stores it.
        if (gw::perf::load(recv_.data(), i, c.dtype) != gw::perf::as_sent(s, c.dtype)) ++out.wrong;
      }
    }
    return out;
  }

  bool dense_reference() const override { return true; }

  double running_sum_error(const Case& c, int steps) override {
    gw_codec_id_t id = GW_CODEC_NONE;
    must(gw_codec_id(c.codec, &id), "gw_codec_id");
    if (id == GW_CODEC_NONE || c.dtype != GW_FLOAT32 || steps <= 0) return -1;
    const size_t n = c.count;
    std::vector<float> in(n + 1), out(n + 1), dense(n + 1);
    std::vector<double> diff(n, 0.0), total(n, 0.0);
    gw_ef_state_t ef = nullptr;
    if (c.ef) must(gw_ef_state_create(n, &ef), "gw_ef_state_create");
    for (int s = 0; s < steps; ++s) {
      for (size_t i = 0; i < n; ++i) {
        in[i] = gw::perf::grad_value(i, c.rank) + gw::perf::grad_value(i, c.rank, static_cast<uint64_t>(s) + 1);
      }
      must(gw_allreduce_ex(c.comm, in.data(), out.data(), n, GW_FLOAT32, c.op, c.codec, ef, c.algo), "gw_allreduce");
      must(gw_allreduce_ex(c.comm, in.data(), dense.data(), n, GW_FLOAT32, c.op, nullptr, nullptr, GW_ALGO_RING),
           "gw_allreduce");
      for (size_t i = 0; i < n; ++i) {
        diff[i] += static_cast<double>(out[i]) - static_cast<double>(dense[i]);
        total[i] += dense[i];
      }
    }
    if (ef != nullptr) must(gw_ef_state_destroy(ef), "gw_ef_state_destroy");
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < n; ++i) {
      err2 += diff[i] * diff[i];
      ref2 += total[i] * total[i];
    }
    return ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
  }

  void release(const Case&) override {
    if (ef_ != nullptr) must(gw_ef_state_destroy(ef_), "gw_ef_state_destroy");
    ef_ = nullptr;
  }

 private:
  std::vector<uint8_t> grad_, ints_, recv_;
  std::vector<double> exact_;
  gw_ef_state_t ef_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  Allreduce coll;
  return gw::perf::run_driver(argc, argv, "allreduce_perf", coll);
}
