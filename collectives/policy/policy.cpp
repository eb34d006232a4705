// Which all-reduce algorithm runs: the caller's choice, else GW_ALGO, else by codec, size
// and rank count; where that says "compress", the measured choice among it, the other
// compressed algorithm that fits and the dense ring (AllreduceTuner, policy.hpp), seeded by
// GW_LINK_GBPS where set, unless GW_TUNE=0.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/policy/policy.hpp"
#include "common/log.hpp"

namespace gw {

namespace coll {

CostInput cost_input(const PolicyInput& in, Algo algo, double link_gbps) {
  static const CostModel kDefaults;
  const CostModel& m = in.model != nullptr ? *in.model : kDefaults;
  const double bytes = static_cast<double>(in.count) * static_cast<double>(dtype_size(in.dtype));
  double enc = bytes;
  CodecRates rates = m.default_codec;
  if (in.codec != nullptr && !dense_algorithm(algo)) {
    enc = static_cast<double>(in.codec->max_encoded_bytes(in.count, in.dtype));
    rates = m.rates(codec_name(in.codec->id()));
  }
  return CostInput{in.nranks > 0 ? static_cast<double>(in.nranks) : 1.0,
                   bytes,
                   enc,
                   link_gbps > 0 ? link_gbps * 1e9 / 8 : m.link_bytes_per_s,
                   m.latency_s,
                   m.message_cpu_s,
                   rates.encode_bytes_per_s,
                   rates.decode_bytes_per_s,
                   m.reduce_bytes_per_s,
                   m.sparse_sum_bytes_per_s};
}

double model_seconds(const PolicyInput& in, Algo algo, double link_gbps) {
  const AlgorithmRow* row = find_algorithm(algo == Algo::kAuto ? Algo::kRing : algo);
  if (row == nullptr || row->cost == nullptr) return 0;
  return row->cost(cost_input(in, algo, link_gbps));
}

Algo choose_dense(const PolicyInput& in) {
  const double bytes = static_cast<double>(in.count) * static_cast<double>(dtype_size(in.dtype));
  if (in.on_device || in.nranks <= 1 || bytes == 0) return Algo::kRing;
  PolicyInput dense = in;
  dense.codec = nullptr;
  Algo best = Algo::kRing;
  double t = model_seconds(dense, Algo::kRing);
  for (Algo a : {Algo::kRecursiveDoubling, Algo::kRabenseifner}) {
    // At 2 ranks Rabenseifner is the ring's schedule (one step each way), less its pipelining
    // across the two.
    if (a == Algo::kRabenseifner && in.nranks <= 2) continue;
    if (const double s = model_seconds(dense, a); s < t) {
      best = a;
      t = s;
    }
  }
  return best;
}

bool dense_call(const PolicyInput& in) {
  return in.codec == nullptr || in.codec->id() == CodecId::kNone || in.dtype != DType::kFloat32 ||
         in.count * dtype_size(in.dtype) < in.dense_threshold_bytes;
}

Algo choose_allreduce(const PolicyInput& in) {
  if (in.requested != Algo::kAuto) return in.requested;
  if (in.configured != Algo::kAuto) return in.configured;
  if (dense_call(in)) return choose_dense(in);
  if (in.nranks == 1) return Algo::kScatterReduce;
  if (in.codec->spec().is_sparse()) {
    // All-gather moves (p - 1) messages of about k entries into every rank; a ring or
    // scatter-reduce moves about 2 (p - 1) / p of a dense chunk. Gather wins while k p < n.
    const uint64_t k = in.codec->spec().k_for(in.count);
    const bool gather = k * static_cast<uint64_t>(in.nranks) < in.count;
    if (!in.on_device && in.nranks > 2) {
      // Sparse doubling sums the same messages as the gather in log p steps, each capped at a
      // dense buffer's bytes. While the gather fits, the exact sums are weighed against each
      // other; past that, sparse doubling against the compressed all-reduces, which
      // re-compress partial sums (the tuner may still time those against the gather). Ties
      // keep the earlier.
      Algo best = gather ? Algo::kSparseAllgather : Algo::kScatterReduce;
      double t = model_seconds(in, best);
      for (Algo a : {Algo::kSparseDoubling, Algo::kScatterReduce, Algo::kHalvingDoubling}) {
        if (a == best || (gather && a != Algo::kSparseDoubling)) continue;
        if (const double s = model_seconds(in, a); s < t) {
          best = a;
          t = s;
        }
      }
      return best;
    }
    if (gather) return Algo::kSparseAllgather;
  }
  if (in.on_device || in.nranks <= 2) return Algo::kScatterReduce;  // at 2 ranks the two are one
  return model_seconds(in, Algo::kHalvingDoubling) < model_seconds(in, Algo::kScatterReduce) ? Algo::kHalvingDoubling
                                                                                             : Algo::kScatterReduce;
}

}  // namespace coll
}  // namespace gw

namespace gw::coll {

std::string AllreduceTuner::key(size_t count, DType dtype, const Codec& codec) {
  return codec.spec().to_string() + "|" + std::to_string(count) + "|" + dtype_name(dtype);
}

double AllreduceTuner::median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

int AllreduceTuner::slot(const Entry& e, Algo a) const {
  for (int j = 0; j < e.cand.n; ++j) {
    if (e.cand.algo[j] == a) return j;
  }
  return -1;
}

AllreduceTuner::Plan AllreduceTuner::plan(const std::string& key, const Candidates& c) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    Entry e;
    e.cand = c;
    if (e.cand.n < 1) e.cand.n = 1;  // the ring alone: nothing to weigh
    if (e.cand.seed < 0 || e.cand.seed >= e.cand.n) e.cand.seed = 0;
    // Before the first decision the incumbent is the seed when a link speed gave one, else
    // the dense ring: compression has to earn its cost in accuracy.
    e.current = c.seeded || slot(e, Algo::kRing) < 0 ? e.cand.algo[e.cand.seed] : Algo::kRing;
    it = entries_.emplace(key, std::move(e)).first;
  }
  Entry& e = it->second;
  const int n = e.cand.n;
  const int total = trial_calls(n);
  if (e.trial_calls < total) {
    const int i = e.trial_calls++;
    if (n == 1) return Plan{e.cand.algo[0], i >= 1, i == total - 1, true};
    if (i < n) return Plan{e.cand.algo[(e.cand.seed + i) % n], false, false, true};  // warm-up round
    const int b = i - n;
    return Plan{e.cand.algo[(e.cand.seed + b / kBlock) % n], b % kBlock == kBlock - 1, i == total - 1, true};
  }
  if (n == 1) return Plan{e.current, false, false, false};
  if (e.until_refresh > 0) {
    --e.until_refresh;
    return Plan{e.current, true, false, false};
  }
  // A refresh round: a block of every candidate but the incumbent, in slot order.
  const int k = e.refresh_pos++;
  const bool block_end = k % kBlock == kBlock - 1;
  int seen = 0;
  for (int j = 0; j < n; ++j) {
    if (e.cand.algo[j] == e.current) continue;
    if (seen++ == k / kBlock) {
      const bool last = seen == n - 1 && block_end;
      if (last) e.refresh_pos = 0;
      return Plan{e.cand.algo[j], block_end, last, true};
    }
  }
  e.refresh_pos = 0;  // not reached: the incumbent is always a candidate
  return Plan{e.current, true, false, false};
}

void AllreduceTuner::record(const std::string& key, Algo ran, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  const int j = slot(it->second, ran);
  if (j < 0) return;
  std::vector<double>& t = it->second.times[j];
  t.push_back(seconds);
  if (t.size() > static_cast<size_t>(kWindow)) t.erase(t.begin());
}

void AllreduceTuner::local_stats(const std::string& key, double out[kExchange]) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (int j = 0; j < kMaxCandidates; ++j) {
    out[2 * j] = -1;
    out[2 * j + 1] = 0;
  }
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  for (int j = 0; j < it->second.cand.n; ++j) {
    out[2 * j] = median(it->second.times[j]);
    out[2 * j + 1] = static_cast<double>(it->second.times[j].size());
  }
}

AllreduceTuner::Verdict AllreduceTuner::decide(const std::string& key, const double* all, int nranks) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[key];
  Verdict v;
  v.n = e.cand.n;
  for (int j = 0; j < v.n; ++j) {
    v.algo[j] = e.cand.algo[j];
    double slowest = -1;
    int fewest = nranks > 0 ? kWindow : 0;
    for (int r = 0; r < nranks; ++r) {
      const double m = all[static_cast<size_t>(r) * kExchange + 2 * j];
      const int s = static_cast<int>(all[static_cast<size_t>(r) * kExchange + 2 * j + 1]);
      if (m < 0 || s <= 0) fewest = 0;
      if (s < fewest) fewest = s;
      if (m > slowest) slowest = m;
    }
    v.slowest[j] = fewest > 0 ? slowest : -1;
    v.samples[j] = fewest;
  }
  v.before = e.current;
  const int inc = slot(e, e.current);
  // The fastest candidate with enough samples; it replaces the incumbent only by the margin
  // (and only where the incumbent has enough samples to be compared at all).
  int best = -1;
  for (int j = 0; j < v.n; ++j) {
    if (v.samples[j] < kMinSamples) continue;
    if (best < 0 || v.slowest[j] < v.slowest[best]) best = j;
  }
  int pick = inc;
  if (best >= 0 && best != inc) {
    const bool inc_known = inc >= 0 && v.samples[inc] >= kMinSamples;
    if (!inc_known || v.slowest[best] * (1.0 + kMargin) < v.slowest[inc]) pick = best;
  }
  v.pick = pick >= 0 ? e.cand.algo[pick] : e.current;
  v.switched = v.pick != e.current;
  const bool first = !e.decided;
  // Back off while the decision holds and is measured fastest; a new decision, or one that
  // holds only by the margin (measured slower, not by enough), is checked again soon.
  if (first || v.switched || best != pick) {
    e.interval = kRefresh;
  } else {
    e.interval = std::min(2 * e.interval, kRefreshMax);
  }
  e.current = v.pick;
  e.decided = true;
  e.until_refresh = e.interval;
  e.refresh_pos = 0;
  v.agreement = ++e.agreements;
  v.next_refresh = e.interval;
  return v;
}

Algo AllreduceTuner::decided(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  return it == entries_.end() || !it->second.decided ? Algo::kAuto : it->second.current;
}

std::string AllreduceTuner::Verdict::describe() const {
  std::string s = "agreement " + std::to_string(agreement) + ":";
  for (int j = 0; j < n; ++j) {
    char buf[96];
    if (slowest[j] >= 0) {
      std::snprintf(buf, sizeof buf, " %s %.3f ms (%d samples)%s", algo_name(algo[j]), slowest[j] * 1e3, samples[j],
                    j + 1 < n ? "," : "");
    } else {
      std::snprintf(buf, sizeof buf, " %s unmeasured%s", algo_name(algo[j]), j + 1 < n ? "," : "");
    }
    s += buf;
  }
  s += std::string(" (slowest rank's median): runs ") + algo_name(pick);
  s += switched ? std::string(", switched from ") + algo_name(before) : std::string(", kept");
  s += ", next check in " + std::to_string(next_refresh) + " calls";
  return s;
}

AllreduceTuner::Candidates allreduce_candidates(const PolicyInput& in, Algo static_choice, bool on_device,
                                                double link_gbps) {
  AllreduceTuner::Candidates c;
  auto add = [&](Algo a) {
    for (int j = 0; j < c.n; ++j) {
      if (c.algo[j] == a) return;
    }
    if (c.n < AllreduceTuner::kMaxCandidates) c.algo[c.n++] = a;
  };
  add(static_choice);
  const AlgorithmRow* chosen = find_algorithm(static_choice);
  if (chosen != nullptr && chosen->composite) {
    add(choose_allreduce(in));  // the flat path it has to beat
  } else {
    // The rows that say they are worth weighing against this static choice.
    const bool sparse = in.codec != nullptr && in.codec->spec().is_sparse();
    const bool fits = sparse && in.codec->spec().k_for(in.count) * static_cast<uint64_t>(in.nranks) < in.count;
    const TuneInput t{static_choice, sparse, in.nranks, on_device, fits};
    for (const AlgorithmRow& row : algorithms()) {
      if (row.weighed != nullptr && row.weighed(t)) add(row.id);
    }
  }
  add(Algo::kRing);  // the dense baseline, always weighed
  c.seed = 0;
  c.seeded = link_gbps > 0;
  if (link_gbps > 0) {
    double best = -1;
    for (int j = 0; j < c.n; ++j) {
      const double t = model_seconds(in, c.algo[j], link_gbps);
      if (best < 0 || t < best) {
        best = t;
        c.seed = j;
      }
    }
  }
  return c;
}

double parse_link_gbps(const char* text) {
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end != text && *end == '\0' && std::isfinite(v) && v > 0) return v;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    GW_WARN(kTune,
            "GW_LINK_GBPS='%s' is not a positive number of Gbit/s; ignored (the tuner starts from the static choice)",
            text);
  }
  return 0;
}

double link_gbps_from_env() { return parse_link_gbps(std::getenv("GW_LINK_GBPS")); }

}  // namespace gw::coll
