// gw_sim: simulated time of all-reduces at any rank count (engine.hpp), beside the closed form
// the policy decides with (algorithm_table.cpp's cost hooks), on a measured cost model.
//
//   gw_sim [--model FILE] [--cores N] [--codec SPEC] [--chunk-bytes B] [--max-in-flight N]
//          [--no-checks] [--json] [--policy [--no-replay]]
//          --ranks P[,P...] --bytes B[,B...] [--algo A[,A...]]
//
// Sizes take K, M and G suffixes (binary). --algo defaults to every schedule; compressed ones
// need --codec. --policy prints the policy's static choice for each (ranks, bytes) beside the
// replay's fastest among what it weighs (--no-replay: the choice alone). Otherwise one line
// per (algorithm, ranks, bytes): simulated seconds of the slowest rank, the closed form's
// seconds, messages and operations replayed, and how long the replay took.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/policy/policy.hpp"
#include "tools/sim/engine.hpp"
#include "tools/sim/schedules.hpp"

namespace {

[[noreturn]] void usage(const char* msg) {
  if (msg != nullptr) std::fprintf(stderr, "gw_sim: %s\n", msg);
  std::fprintf(stderr,
               "usage: gw_sim [--model FILE] [--cores N] [--codec SPEC] [--chunk-bytes B] [--max-in-flight N]\n"
               "              [--no-checks] [--json] [--policy [--no-replay]]\n"
               "              --ranks P[,P...] --bytes B[,B...] [--algo A[,A...]]\n");
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t c = s.find(',', at);
    out.push_back(s.substr(at, c == std::string::npos ? std::string::npos : c - at));
    if (c == std::string::npos) break;
    at = c + 1;
  }
  return out;
}

uint64_t parse_size(const std::string& s, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  double mult = 1;
  if (end != nullptr && *end != '\0') {
    if (std::strcmp(end, "K") == 0)
      mult = 1024.0;
    else if (std::strcmp(end, "M") == 0)
      mult = 1024.0 * 1024;
    else if (std::strcmp(end, "G") == 0)
      mult = 1024.0 * 1024 * 1024;
    else
      usage((std::string(what) + " '" + s + "' is not a size").c_str());
  }
  if (end == s.c_str() || !std::isfinite(v) || v < 0 || v * mult > 1e15) {
    usage((std::string(what) + " '" + s + "' is not a size").c_str());
  }
  return static_cast<uint64_t>(v * mult);
}

// The policy's static choice for each (ranks, bytes) from its closed forms, and the replay's
// fastest among the same candidates (where the replay is cheap: up to 4096 ranks).
int print_policy(const gw::coll::CostModel& model, const gw::Codec* codec, const std::string& spec,
                 const std::vector<int>& ranks, const std::vector<uint64_t>& sizes, const gw::sim::Limits& limits,
                 bool replay) {
  std::printf("# model: %s (%s); codec %s; the policy's choice (closed forms) and the replay's fastest\n",
              model.source.c_str(), model.transport.c_str(), codec ? spec.c_str() : "none (dense)");
  std::printf("%7s %12s %-20s %-20s %s\n", "ranks", "bytes", "policy", "replay_fastest", "agree");
  int disagree = 0;
  for (int p : ranks) {
    for (uint64_t bytes : sizes) {
      gw::coll::PolicyInput in{bytes / 4, gw::DType::kFloat32, codec, p, gw::Algo::kAuto, gw::Algo::kAuto, 0, false,
                               &model};
      const gw::Algo pick = gw::coll::choose_allreduce(in);
      // What the static rule weighs: ring and recursive doubling (dense), or
      // scatter-reduce and halving-doubling (value codecs), or those, sparse doubling and the
      // sparse all-gather while k p < n (sparse codecs).
      std::vector<gw::Algo> cand;
      if (codec == nullptr) {
        cand = {gw::Algo::kRing};
        if (p > 1) cand.push_back(gw::Algo::kRecursiveDoubling);
        if (p > 2) cand.push_back(gw::Algo::kRabenseifner);  // at 2 ranks the ring's schedule
      } else if (p <= 2 && pick == gw::Algo::kSparseAllgather) {
        cand = {gw::Algo::kSparseAllgather};
      } else {
        const bool fits =
            codec->spec().is_sparse() && codec->spec().k_for(bytes / 4) * static_cast<uint64_t>(p) < bytes / 4;
        if (fits) {
          cand = {gw::Algo::kSparseAllgather};  // with sparse doubling: the exact sparse sums
        } else {
          cand = {gw::Algo::kScatterReduce};
          if (p > 2) cand.push_back(gw::Algo::kHalvingDoubling);
        }
        if (p > 2 && codec->spec().is_sparse()) cand.push_back(gw::Algo::kSparseDoubling);
      }
      // Agreement: the policy's pick replays within kTie of the fastest (closer calls are
      // within the model's resolution either way).
      constexpr double kTie = 0.10;
      std::string fastest = "-";
      double best = -1, picked = -1;
      if (replay && p <= 4096) {
        for (gw::Algo a : cand) {
          const std::string name = gw::coll::find_algorithm(a)->name;
          auto s = gw::sim::make_schedule(name, gw::sim::Call{p, bytes / 4, size_t{1} << 20, codec}, model);
          if (s == nullptr) continue;
          const gw::sim::Outcome o = gw::sim::simulate(*s, model, limits);
          if (!o.error.empty()) continue;
          if (a == pick) picked = o.seconds;
          if (best < 0 || o.seconds < best) best = o.seconds, fastest = name;
        }
      }
      const char* name = gw::coll::find_algorithm(pick)->name;
      const bool agree = fastest == "-" || fastest == name || (picked > 0 && picked <= (1 + kTie) * best);
      disagree += agree ? 0 : 1;
      std::printf("%7d %12llu %-20s %-20s %s\n", p, static_cast<unsigned long long>(bytes), name, fastest.c_str(),
                  fastest == "-" ? "-" : (agree ? "yes" : "NO"));
    }
  }
  std::printf("# %d disagreement(s)\n", disagree);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, codec_spec, ranks_s, bytes_s, algos_s;
  int cores = -1;
  size_t chunk_bytes = size_t{1} << 20;
  bool json = false;
  bool policy = false;
  bool replay = true;  // --policy: replay the candidates too
  bool checks = true;
  gw::sim::Limits limits;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--model")
      model_path = next();
    else if (a == "--cores")
      cores = static_cast<int>(parse_size(next(), "--cores"));
    else if (a == "--codec")
      codec_spec = next();
    else if (a == "--chunk-bytes")
      chunk_bytes = parse_size(next(), "--chunk-bytes");
    else if (a == "--ranks")
      ranks_s = next();
    else if (a == "--bytes")
      bytes_s = next();
    else if (a == "--algo")
      algos_s = next();
    else if (a == "--json")
      json = true;
    else if (a == "--policy")
      policy = true;
    else if (a == "--no-checks")
      checks = false;
    else if (a == "--no-replay")
      replay = false;
    else if (a == "--max-in-flight")
      limits.max_in_flight = parse_size(next(), "--max-in-flight");
    else if (a == "-h" || a == "--help")
      usage(nullptr);
    else
      usage(("unknown argument '" + a + "'").c_str());
  }
  if (ranks_s.empty() || bytes_s.empty()) usage("--ranks and --bytes are needed");
  if (chunk_bytes == 0) usage("--chunk-bytes must be > 0");
  gw::coll::CostModel model;
  if (!model_path.empty()) {
    auto m = gw::coll::load_cost_model(model_path);
    if (!m.is_ok()) usage(m.status().message().c_str());
    model = m.value();
  }
  if (cores >= 0) model.cores = cores;
  std::unique_ptr<gw::Codec> codec;
  if (!codec_spec.empty()) {
    auto c = gw::Codec::create(codec_spec);
    if (!c.is_ok()) usage(("--codec: " + c.status().message()).c_str());
    codec = std::move(c.value());
  }
  std::vector<std::string> algos = algos_s.empty() ? gw::sim::schedule_names() : split(algos_s);
  std::vector<int> ranks;
  for (const auto& r : split(ranks_s)) {
    const uint64_t v = parse_size(r, "--ranks");
    if (v < 1 || v > 65536) usage(("--ranks " + r + " is not in [1, 65536]").c_str());
    ranks.push_back(static_cast<int>(v));
  }
  std::vector<uint64_t> sizes;
  for (const auto& b : split(bytes_s)) sizes.push_back(parse_size(b, "--bytes"));
  for (const auto& a : algos) {
    bool known = false;
    for (const auto& n : gw::sim::schedule_names()) known = known || n == a;
    if (!known) usage(("--algo '" + a + "' names no schedule").c_str());
  }

  if (policy) return print_policy(model, codec.get(), codec_spec, ranks, sizes, limits, replay);
  if (!json) {
    std::printf("# model: %s (%s), cores %d; codec %s\n", model.source.c_str(), model.transport.c_str(), model.cores,
                codec ? codec_spec.c_str() : "-");
    std::printf("%-19s %7s %12s %14s %14s %12s %12s %9s\n", "algorithm", "ranks", "bytes", "sim_s", "closed_form_s",
                "messages", "ops", "wall_s");
  }
  int rc = 0;
  for (const auto& a : algos) {
    if (gw::sim::compressed_schedule(a) && !codec) {
      std::fprintf(stderr, "gw_sim: %s needs --codec; skipped\n", a.c_str());
      continue;
    }
    if (a == "sparse_doubling" && !codec->spec().is_sparse()) {
      std::fprintf(stderr, "gw_sim: sparse_doubling takes sparse codecs (topk, dgc, randomk); skipped\n");
      continue;
    }
    for (int p : ranks) {
      for (uint64_t bytes : sizes) {
        gw::sim::Call call{p, bytes / 4, chunk_bytes, codec.get(), checks};
        auto s = gw::sim::make_schedule(a, call, model);
        const auto t0 = std::chrono::steady_clock::now();
        const gw::sim::Outcome o = gw::sim::simulate(*s, model, limits);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double closed = -1;
        if (const gw::coll::AlgorithmRow* row = gw::coll::find_algorithm(a); row != nullptr) {
          const gw::coll::PolicyInput in{
              bytes / 4, gw::DType::kFloat32, codec.get(), p, gw::Algo::kAuto, gw::Algo::kAuto, 0, false, &model};
          closed = gw::coll::model_seconds(in, row->id);
        }
        if (!o.error.empty()) rc = 1;
        if (json) {
          std::printf(
              "{\"algo\": \"%s\", \"ranks\": %d, \"bytes\": %llu, \"codec\": \"%s\", \"sim_s\": %.9g, "
              "\"closed_form_s\": %.9g, \"messages\": %llu, \"ops\": %llu, \"wall_s\": %.3f, \"error\": \"%s\"}\n",
              a.c_str(), p, static_cast<unsigned long long>(bytes), codec ? codec_spec.c_str() : "",
              o.error.empty() ? o.seconds : -1.0, closed, static_cast<unsigned long long>(o.messages),
              static_cast<unsigned long long>(o.events), wall, o.error.c_str());
        } else if (!o.error.empty()) {
          std::printf("%-19s %7d %12llu   not simulated: %s\n", a.c_str(), p, static_cast<unsigned long long>(bytes),
                      o.error.c_str());
        } else {
          std::printf("%-19s %7d %12llu %14.6g %14.6g %12llu %12llu %9.2f\n", a.c_str(), p,
                      static_cast<unsigned long long>(bytes), o.seconds, closed,
                      static_cast<unsigned long long>(o.messages), static_cast<unsigned long long>(o.events), wall);
        }
        std::fflush(stdout);
      }
    }
  }
  return rc;
}
