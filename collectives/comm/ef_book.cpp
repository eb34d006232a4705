#include "collectives/comm/ef_book.hpp"

#include "collectives/algorithms/algorithm_table.hpp"
#include "collectives/algorithms/device/device_backend.hpp"
#include "collectives/algorithms/schedules/ef_rules.hpp"
#include "collectives/common/context.hpp"
#include "compressors/device_ef_state.hpp"

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
  Entry& e = states_[&ef];
  const bool moved = e.owner_algo != next || e.owner_rank != rank || e.owner_p != p;
  if (e.owner_algo != Algo::kAuto && moved && ef.owner_count() > 0 && e.owner_p > 0) {
    const Partition part{n, static_cast<uint64_t>(e.owner_p)};
    const uint64_t seg = owner_segment(e.owner_algo, e.owner_rank, e.owner_p);
    const size_t len = ef.owner_count();
    if (ef.count() == n && seg < static_cast<uint64_t>(e.owner_p) && len == part.length(seg)) {
      fold_owner_residual(ef, part.start(seg), len);
    }
  }
  e.owner_algo = next;
  e.owner_rank = rank;
  e.owner_p = p;
}

Status EfBook::rehome_device_owner_residual(DeviceEfState& ef, DeviceBackend& dev, size_t n, int rank, int p) {
  Entry& e = states_[&ef];
  const bool moved = e.owner_rank != rank || e.owner_p != p;
  if (e.owner_algo == Algo::kScatterReduce && moved && ef.owner_count() > 0 && e.owner_p > 0 && e.owner_rank >= 0) {
    const Partition part{n, static_cast<uint64_t>(e.owner_p)};
    const uint64_t seg = static_cast<uint64_t>(e.owner_rank);
    const size_t len = ef.owner_count();
    if (ef.count() == n && seg < static_cast<uint64_t>(e.owner_p) && len == part.length(seg)) {
      GW_ASSIGN_OR_RETURN(float* owner, ef.owner_residual(len));
      // residual[segment] += owner; owner = 0 (fold_owner's "owner += sum; sum = 0", reversed).
      GW_RETURN_IF_ERROR(dev.fold_owner(ef.residual() + part.start(seg), owner, len, 1));
    }
  }
  e.owner_algo = Algo::kScatterReduce;
  e.owner_rank = rank;
  e.owner_p = p;
  return Status::ok();
}

EfBook EfBook::inherited() const {
  EfBook book;
  book.states_ = states_;
  return book;
}

}  // namespace gw::coll
