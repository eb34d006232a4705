#include "collectives/comm/ef_book.hpp"

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/algorithms/schedules/ef_rules.hpp"
#include "collectives/common/context.hpp"

namespace gw::coll {

const EfBook::Entry* EfBook::find(const void* ef) const {
  auto it = states_.find(ef);
  return it == states_.end() ? nullptr : &it->second;
}

bool EfBook::needs_flush(const void* ef) const {
  const Entry* e = find(ef);
  return e != nullptr && e->unflushed;
}

void EfBook::after_allreduce(const void* ef, Algo ran, bool flushed) {
  if (!coll::dense_algorithm(ran)) {
    states_[ef].unflushed = true;
  } else if (flushed) {
    states_[ef].unflushed = false;
  }
}

bool EfBook::hier_filled(const void* ef) const {
  const Entry* e = find(ef);
  return e != nullptr && e->hier_filled;
}

void EfBook::mark_hier_filled(const void* ef) { states_[ef].hier_filled = true; }

void EfBook::mark_flat_filled(const void* ef) {
  auto it = states_.find(ef);
  if (it != states_.end()) it->second.hier_filled = false;
}

void EfBook::rehome_owner_residual(ErrorFeedback& ef, Algo next, size_t n, int rank, int p) {
  Algo& was = states_[&ef].owner_algo;
  if (was != Algo::kAuto && was != next && ef.owner_count() > 0) {
    const Partition part{n, static_cast<uint64_t>(p)};
    const uint64_t seg = owner_segment(was, rank, p);
    const size_t len = ef.owner_count();
    if (ef.count() == n && len == part.length(seg)) fold_owner_residual(ef, part.start(seg), len);
  }
  was = next;
}

}  // namespace gw::coll
