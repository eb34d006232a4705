// The all-reduce algorithm table (collectives/algorithms/algorithm_table.hpp): one row per
// public Algo value, names that parse back, entry points where the row says it runs, step
// ranges and scratch slots that do not collide, and the documentation (configuration.md,
// performance.md) and the Python package naming exactly the table's algorithms.
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "collectives/algorithms/algorithm_table.hpp"
#include "gradwire/gradwire.h"

namespace gw::coll {
namespace {

std::string read_source(const std::string& path) {
  std::ifstream in(std::string(GW_SOURCE_DIR) + "/" + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The `...` words of the table row of docs/configuration.md that documents var.
std::set<std::string> documented_values(const std::string& doc, const std::string& var) {
  std::istringstream lines(doc);
  std::string line;
  const std::string head = "| `" + var + "` |";
  while (std::getline(lines, line)) {
    if (line.compare(0, head.size(), head) != 0) continue;
    std::set<std::string> words;
    const std::regex quoted("`([^`]*)`");
    for (std::sregex_iterator it(line.begin() + static_cast<long>(head.size()), line.end(), quoted), end; it != end;
         ++it) {
      words.insert((*it)[1].str());
    }
    return words;
  }
  ADD_FAILURE() << "docs/configuration.md has no row for " << var;
  return {};
}

TEST(AlgorithmTable, EveryPublicAlgoHasOneRow) {
  const Algo all[] = {Algo::kRing,         Algo::kCompressedRing,    Algo::kScatterReduce,   Algo::kSparseAllgather,
                      Algo::kHierarchical, Algo::kRecursiveDoubling, Algo::kHalvingDoubling, Algo::kSparseDoubling,
                      Algo::kRabenseifner};
  EXPECT_EQ(algorithms().n, sizeof all / sizeof all[0]);
  for (Algo a : all) {
    const AlgorithmRow* row = find_algorithm(a);
    ASSERT_NE(row, nullptr) << static_cast<int>(a);
    EXPECT_EQ(row->id, a);
  }
  EXPECT_EQ(find_algorithm(Algo::kAuto), nullptr);  // the policy, not an algorithm
  EXPECT_EQ(find_algorithm(static_cast<Algo>(algorithms().n + 1)), nullptr);
  // The C ABI's values are the same.
  EXPECT_EQ(static_cast<int>(Algo::kAuto), GW_ALGO_AUTO);
  EXPECT_EQ(static_cast<int>(Algo::kRing), GW_ALGO_RING);
  EXPECT_EQ(static_cast<int>(Algo::kCompressedRing), GW_ALGO_COMPRESSED_RING);
  EXPECT_EQ(static_cast<int>(Algo::kScatterReduce), GW_ALGO_SCATTER_REDUCE);
  EXPECT_EQ(static_cast<int>(Algo::kSparseAllgather), GW_ALGO_SPARSE_ALLGATHER);
  EXPECT_EQ(static_cast<int>(Algo::kHierarchical), GW_ALGO_HIERARCHICAL);
  EXPECT_EQ(static_cast<int>(Algo::kRecursiveDoubling), GW_ALGO_RECURSIVE_DOUBLING);
  EXPECT_EQ(static_cast<int>(Algo::kHalvingDoubling), GW_ALGO_HALVING_DOUBLING);
  EXPECT_EQ(static_cast<int>(Algo::kSparseDoubling), GW_ALGO_SPARSE_DOUBLING);
  EXPECT_EQ(static_cast<int>(Algo::kRabenseifner), GW_ALGO_RABENSEIFNER);
  for (int v = 0; v <= static_cast<int>(algorithms().n) + 1; ++v) {
    EXPECT_EQ(algo_value_known(v), v <= static_cast<int>(algorithms().n)) << v;
  }
}

TEST(AlgorithmTable, NamesAreUniqueAndParseBack) {
  std::set<std::string> names{"auto"};
  for (const AlgorithmRow& row : algorithms()) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name;
    EXPECT_NE(std::string(row.description), "");
    EXPECT_STREQ(algo_name(row.id), row.name);
    auto parsed = parse_algo(row.name);
    ASSERT_TRUE(parsed.is_ok()) << row.name;
    EXPECT_EQ(*parsed, row.id);
    EXPECT_EQ(find_algorithm(std::string(row.name)), &row);
  }
  EXPECT_STREQ(algo_name(Algo::kAuto), "auto");
  EXPECT_EQ(*parse_algo("auto"), Algo::kAuto);
  EXPECT_STREQ(algo_name(static_cast<Algo>(99)), "unknown");
  auto bad = parse_algo("fastest");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(),
            "unknown algorithm 'fastest' (known: auto, ring, compressed_ring, scatter_reduce, sparse_allgather, "
            "hierarchical, recursive_doubling, halving_doubling, sparse_doubling, rabenseifner)");
  EXPECT_EQ(algorithm_choices(" or "),
            "auto, ring, compressed_ring, scatter_reduce, sparse_allgather, hierarchical, recursive_doubling, "
            "halving_doubling, sparse_doubling or rabenseifner");
}

TEST(AlgorithmTable, EntryPointsWhereTheRowSaysItRuns) {
  for (const AlgorithmRow& row : algorithms()) {
    SCOPED_TRACE(row.name);
    EXPECT_NE(row.cost, nullptr);
    EXPECT_NE(row.collectives & kServesAllreduce, 0);
    EXPECT_NE(row.memory & kHostMemory, 0);
    if (row.composite) {
      EXPECT_EQ(row.host, nullptr);  // the communicator runs it
      EXPECT_EQ(row.device, nullptr);
      continue;
    }
    EXPECT_NE(row.host, nullptr);
    EXPECT_EQ(row.device != nullptr, (row.memory & kDeviceMemory) != 0);
    const AlgorithmRow* stand_in = find_algorithm(row.device_counterpart);
    ASSERT_NE(stand_in, nullptr);
    EXPECT_NE(stand_in->device, nullptr) << "its device counterpart runs on device buffers";
  }
}

TEST(AlgorithmTable, StepRangesAreDisjointAndKeepTheirWireValues) {
  for (const AlgorithmRow& row : algorithms()) {
    SCOPED_TRACE(row.name);
    ASSERT_GT(row.step_ranges, 0);
    for (int i = 0; i < row.step_ranges; ++i) {
      const StepRange& r = row.steps[i];
      EXPECT_GT(r.size, 0u) << r.what;
      EXPECT_LE(r.end(), kCallCheckSteps.base) << r.what;
      for (int j = i + 1; j < row.step_ranges; ++j) EXPECT_FALSE(r.overlaps(row.steps[j])) << r.what;
    }
  }
  EXPECT_TRUE(disjoint_below_call_check(kHierSparseAllgatherSteps, 3));
  // The steps peers put on the wire, as before the table: a change here breaks interoperation.
  EXPECT_EQ(kCallCheckSteps.base, kMaxSteps - 1);
  EXPECT_EQ(kGatherLengthSteps.base, 2048u);
  EXPECT_EQ(kHierInNodeSteps.base, 0u);
  EXPECT_EQ(kHierInterSteps.base, 1024u);
  EXPECT_EQ(kHierInterSteps.size, 2048u);
  EXPECT_EQ(kHierGatherSteps.base, 3072u);
  EXPECT_EQ(kNodeShmAnnounceStep, 3600u);
  EXPECT_EQ(kNodeShmFlagStep, 3601u);
  EXPECT_EQ(kNodeShmDecisionStep, 3602u);
  EXPECT_EQ(kHierFenceSteps.base, 3610u);
  EXPECT_EQ(kHierGatherAcrossSteps.base, 1024u);
  // The inter-node leg's pieces (2 x nodes steps each, at most size / stride of them) stay
  // inside its range for every node count.
  for (uint32_t nodes = 1; nodes <= 1024; ++nodes) {
    const uint32_t stride = 2 * nodes;
    EXPECT_LE(kHierInterSteps.size / stride * stride, kHierInterSteps.size);
  }
}

TEST(AlgorithmTable, NestedScratchSlotsAreDisjoint) {
  for (const AlgorithmRow& outer : algorithms()) {
    if (!outer.composite) continue;
    for (const AlgorithmRow& inner : algorithms()) {
      if (inner.composite) continue;
      SCOPED_TRACE(std::string(outer.name) + " around " + inner.name);
      EXPECT_EQ(outer.host_slots & inner.host_slots, 0u);
      EXPECT_EQ(outer.device_slots & inner.device_slots, 0u);
      EXPECT_EQ(outer.staging_slots & inner.staging_slots, 0u);
    }
  }
  EXPECT_EQ(kFlatHostSlots.mask() & kLayoutHostSlots.mask(), 0u);
  EXPECT_EQ(kFlatHostSlots.mask() | kLayoutHostSlots.mask(), 0xffu);  // slots 0-7, as the code has them
}

TEST(AlgorithmTable, ConfigurationDocListsExactlyTheTable) {
  const std::string doc = read_source("docs/configuration.md");
  ASSERT_FALSE(doc.empty()) << "docs/configuration.md not found under " << GW_SOURCE_DIR;
  std::set<std::string> all{"auto"}, flat{"auto"};
  for (const AlgorithmRow& row : algorithms()) {
    all.insert(row.name);
    if (!row.composite) flat.insert(row.name);
  }
  EXPECT_EQ(documented_values(doc, "GW_ALGO"), all) << "GW_ALGO's row in docs/configuration.md";
  EXPECT_EQ(documented_values(doc, "GW_INTER_ALGO"), flat) << "GW_INTER_ALGO's row in docs/configuration.md";
}

TEST(AlgorithmTable, PerformanceDocListsExactlyTheTable) {
  const std::string doc = read_source("docs/performance.md");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(doc, m, std::regex("`--algo ([a-z_|]+)`"))) << "docs/performance.md: `--algo a|b|...`";
  std::set<std::string> listed, want{"auto"};
  std::istringstream names(m[1].str());
  for (std::string name; std::getline(names, name, '|');) listed.insert(name);
  for (const AlgorithmRow& row : algorithms()) want.insert(row.name);
  EXPECT_EQ(listed, want);
}

TEST(AlgorithmTable, PythonPackageNamesTheTable) {
  const std::string lib = read_source("python/gradwire/_lib.py");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(lib, m, std::regex("ALGOS = \\{([^}]*)\\}"))) << "python/gradwire/_lib.py: ALGOS";
  std::map<std::string, int> listed, want{{"auto", 0}};
  const std::string body = m[1].str();
  const std::regex pair("\"([a-z_]+)\": ([0-9]+)");
  for (std::sregex_iterator it(body.begin(), body.end(), pair), end; it != end; ++it) {
    listed[(*it)[1].str()] = std::stoi((*it)[2].str());
  }
  for (const AlgorithmRow& row : algorithms()) want[row.name] = static_cast<int>(row.id);
  EXPECT_EQ(listed, want);
}

}  // namespace
}  // namespace gw::coll
