#include "collectives/checks/call_check.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "collectives/common/context.hpp"
#include "collectives/common/doubling.hpp"
#include "collectives/common/step_ranges.hpp"

namespace gw::coll {

uint64_t CallCheck::tag(uint64_t seq) {
  return ((seq & ((uint64_t{1} << kSeqBits) - 1)) << (kStepBits + kChunkBits)) |
         (static_cast<uint64_t>(kCallCheckSteps.base) << kChunkBits);
}

void CallCheck::add_in(int peer, Edge how) {
  const size_t i = static_cast<size_t>(peer);
  if (peer == rank_ || in_[i] == kOwnMessage) return;  // a message of its own covers a carried copy
  if (in_[i] == kNone) {
    ins_.push_back(peer);
    ++unjudged_;
  }
  in_[i] = how;
}

void CallCheck::add_out(int peer) {
  const size_t i = static_cast<size_t>(peer);
  if (peer == rank_ || out_[i] != 0) return;
  out_[i] = 1;
  outs_.push_back(peer);
}

Status CallCheck::start(transport::Transport& tp, const CallDescriptor& mine, CheckGraph graph) {
  tp_ = &tp;
  rank_ = tp.rank();
  size_ = tp.size();
  failure_ = Status::ok();
  mine_ = mine;
  mine_len_ = encode_descriptor(mine, mine_bytes_);
  const size_t p = static_cast<size_t>(size_);
  if (ops_ < p) {
    sends_.reset(new transport::Op[p]);
    recvs_.reset(new transport::Op[p]);
    inbox_.assign(p * CallDescriptor::kMaxBytes, 0);
    ops_ = p;
  }
  // Per-peer state is cleared where the last call set it, not over all p ranks: a call
  // costs O(its edges), not O(p).
  if (in_.size() != p) {
    in_.assign(p, kNone);
    out_.assign(p, 0);
    judged_.assign(p, 0);
  } else {
    for (int r : ins_) {
      in_[static_cast<size_t>(r)] = kNone;
      judged_[static_cast<size_t>(r)] = 0;
    }
    for (int r : outs_) out_[static_cast<size_t>(r)] = 0;
  }
  ins_.clear();
  outs_.clear();
  unjudged_ = 0;
  active_ = true;
  carries_ = graph == CheckGraph::kDoubling;
  head_unsent_ = false;
  head_at_ = nullptr;
  if (size_ > 1) {
    const int prev = (rank_ + size_ - 1) % size_, next = (rank_ + 1) % size_;
    switch (graph) {
      case CheckGraph::kAllPeers:
        for (int i = 1; i < size_; ++i) {  // starting after this rank spreads the load
          add_in((rank_ + i) % size_, kOwnMessage);
          add_out((rank_ + i) % size_);
        }
        break;
      case CheckGraph::kRing:
        add_in(prev, kOwnMessage);
        add_out(next);
        break;
      case CheckGraph::kRingHead:
        add_in(prev, kHead);
        head_unsent_ = true;
        break;
      case CheckGraph::kDoubling: {
        add_in(prev, kOwnMessage);
        add_out(next);
        const Doubling d(rank_, size_);
        if (d.folded >= 0) add_in(d.folded, kCarried);
        if (d.takes >= 0) add_in(d.takes, kCarried);
        if (d.newrank >= 0) {
          for (int k = 0; k < d.m; ++k) add_in(d.partner(k), kCarried);
        }
        break;
      }
      case CheckGraph::kPartners: {
        add_in(prev, kOwnMessage);
        add_out(next);
        const Doubling d(rank_, size_);
        for (int q : {d.folded, d.takes}) {
          if (q < 0) continue;
          add_in(q, kOwnMessage);
          add_out(q);
        }
        for (int k = 0; d.newrank >= 0 && k < d.m; ++k) {
          add_in(d.partner(k), kOwnMessage);
          add_out(d.partner(k));
        }
        break;
      }
      case CheckGraph::kDissemination:
        for (int dist = 1; dist < size_; dist *= 2) {
          add_in(((rank_ - dist) % size_ + size_) % size_, kOwnMessage);
          add_out((rank_ + dist) % size_);
        }
        break;
    }
  }
  for (int r : ins_) {
    const size_t i = static_cast<size_t>(r);
    if (in_[i] != kOwnMessage) continue;
    // Any length: r - 1 may be making a dense ring's call, whose first message carries data
    // behind its descriptor; that descriptor is still read and named.
    GW_RETURN_IF_ERROR(tp.irecv_head(r, tag(mine.seq), inbox_.data() + i * CallDescriptor::kMaxBytes,
                                     CallDescriptor::kMaxBytes, recvs_[i]));
  }
  unsent_ = true;
  return Status::ok();
}

Status CallCheck::send() {
  unsent_ = false;
  for (int r : outs_) {
    GW_RETURN_IF_ERROR(tp_->isend(r, tag(mine_.seq), mine_bytes_, mine_len_, sends_[static_cast<size_t>(r)]));
  }
  return Status::ok();
}

Status CallCheck::judge_bytes(int peer, const uint8_t* got, size_t len) {
  if (len == mine_len_ && std::memcmp(got, mine_bytes_, mine_len_) == 0) return Status::ok();
  GW_ASSIGN_OR_RETURN(CallDescriptor theirs, parse_descriptor(got, len, peer));
  return invalid_usage("mismatched collective calls: " + describe_mismatch(theirs, peer, mine_, rank_));
}

Status CallCheck::judge_head(int peer, const uint8_t* got, size_t len, size_t* have) {
  *have = descriptor_length(got, len);
  if (*have == 0) {
    GW_RETURN_IF_ERROR(parse_descriptor(got, len, peer).status());
    return Status(Code::kRemote, "rank " + std::to_string(peer) + " sent a malformed call descriptor");
  }
  return judge_bytes(peer, got, *have);
}

// r - 1's first message did not fit the room ahead of and behind this rank's first chunk:
// only a dense ring's first message carries data, so r - 1 made one whose first chunk is
// longer than this rank's by more than the room.
Status CallCheck::longer_than_expected(int peer) const {
  return invalid_usage("mismatched collective calls: rank " + std::to_string(peer) +
                       " called allreduce algo=ring (its first message of call #" + std::to_string(mine_.seq) +
                       " is longer than the " + std::to_string(head_room_) +
                       " bytes this rank's call expects: more elements or a wider dtype), rank " +
                       std::to_string(rank_) + " called " + describe_call(mine_));
}

Status CallCheck::judge(int peer) {
  const size_t i = static_cast<size_t>(peer);
  transport::Op& op = recvs_[i];
  if (op.current() == transport::OpState::kFailed) {
    return transport::is_truncation(op.status) ? longer_than_expected(peer) : op.status;
  }
  judged_[i] = 1;
  --unjudged_;
  size_t have = 0;
  if (in_[i] == kHead) {
    GW_RETURN_IF_ERROR(judge_head(peer, head_at_, op.bytes, &have));
    op.bytes -= have;  // the algorithm sees its data's length
    return Status::ok();
  }
  GW_RETURN_IF_ERROR(judge_head(peer, inbox_.data() + i * CallDescriptor::kMaxBytes,
                                std::min(op.bytes, CallDescriptor::kMaxBytes), &have));
  if (have != op.bytes) {
    return Status(Code::kRemote, "rank " + std::to_string(peer) + " sent " + std::to_string(op.bytes - have) +
                                     " bytes behind a call descriptor that matches this rank's call (" +
                                     describe_call(mine_) + "), whose descriptor travels alone");
  }
  return Status::ok();
}

Status CallCheck::send_ring_head(transport::Transport& tp, const void* buf, size_t len, transport::Op& op) {
  if (!head_unsent_) return internal_error("the call's descriptor was sent ahead of its data twice");
  head_unsent_ = false;
  return tp.isend_with_head((rank_ + 1) % size_, tag(mine_.seq), mine_bytes_, mine_len_, buf, len, op);
}

Result<transport::Op*> CallCheck::recv_ring_head(transport::Transport& tp, void* data, size_t len) {
  const int prev = (rank_ + size_ - 1) % size_;
  const size_t i = static_cast<size_t>(prev);
  if (in_[i] != kHead || head_at_ != nullptr) {
    return internal_error("rank " + std::to_string(prev) + "'s first message posted twice, or outside graph ring-head");
  }
  head_at_ = static_cast<uint8_t*>(data) - mine_len_;
  head_room_ = mine_len_ + len + CallDescriptor::kMaxBytes;
  GW_RETURN_IF_ERROR(tp.irecv(prev, tag(mine_.seq), head_at_, head_room_, recvs_[i]));
  return &recvs_[i];
}

Status CallCheck::take_carried(int peer, const uint8_t* msg, size_t len, size_t* header) {
  *header = 0;
  if (!failure_.is_ok()) return failure_;
  if (!carries_) return Status::ok();
  const size_t i = static_cast<size_t>(peer);
  if (peer < 0 || peer >= size_ || in_[i] == kNone) {
    return internal_error("a descriptor carried from rank " + std::to_string(peer) +
                          ", which this call does not check");
  }
  const size_t have = descriptor_length(msg, len);
  if (have == 0) {  // not kept: the caller may still find the mismatch that explains it
    return Status(Code::kRemote,
                  "rank " + std::to_string(peer) + " sent a message without a call descriptor at its head");
  }
  failure_ = judge_bytes(peer, msg, have);
  if (!failure_.is_ok()) return failure_;
  if (in_[i] == kCarried && judged_[i] == 0) {
    judged_[i] = 1;
    --unjudged_;
  }
  *header = have;
  return Status::ok();
}

Status CallCheck::poll() {
  if (!active_ || !failure_.is_ok()) return failure_;
  if (unsent_) GW_RETURN_IF_ERROR(send());
  if (unjudged_ == 0) return Status::ok();
  for (int r : ins_) {
    const size_t i = static_cast<size_t>(r);
    const bool own = in_[i] == kOwnMessage || (in_[i] == kHead && head_at_ != nullptr);
    if (!own || judged_[i] != 0 || !recvs_[i].finished()) continue;
    failure_ = judge(r);
    if (!failure_.is_ok()) return failure_;
  }
  return Status::ok();
}

Status CallCheck::require(int peer, transport::Clock::time_point deadline) {
  if (!active_ || !failure_.is_ok()) return failure_;
  if (unsent_) GW_RETURN_IF_ERROR(send());
  const size_t i = static_cast<size_t>(peer);
  if (peer < 0 || peer >= size_ || peer == rank_ || judged_[i] != 0) return Status::ok();
  if (in_[i] == kCarried) return Status::ok();  // the algorithm judges it (take_carried)
  if (in_[i] == kHead && head_at_ == nullptr) {
    failure_ = internal_error("rank " + std::to_string(peer) +
                              "'s descriptor rides at the head of its first message (#" + std::to_string(mine_.seq) +
                              " " + call_kind_name(mine_.kind) + "), whose receive the algorithm never posted");
    return failure_;
  }
  if (in_[i] == kNone) {
    failure_ = internal_error("data from rank " + std::to_string(peer) + ", which the check of this call (#" +
                              std::to_string(mine_.seq) + " " + call_kind_name(mine_.kind) + ") does not cover");
    return failure_;
  }
  const Status waited = tp_->wait(recvs_[i], deadline);
  if (!recvs_[i].finished()) {
    return Status(Code::kTimeout, "rank " + std::to_string(peer) + " did not start collective #" +
                                      std::to_string(mine_.seq) + " (" + call_kind_name(mine_.kind) + ") in time");
  }
  failure_ = waited.is_ok() || recvs_[i].current() == transport::OpState::kFailed ? judge(peer) : waited;
  return failure_;
}

std::string CallCheck::not_started() const {
  if (!active_) return "";
  std::string ranks;
  int n = 0;
  for (int r : ins_) {
    const size_t i = static_cast<size_t>(r);
    if (in_[i] == kCarried || judged_[i] != 0 || recvs_[i].finished()) continue;
    ranks += (n++ == 0 ? "" : ", ") + std::to_string(r);
  }
  if (n == 0) return "";
  return std::string("; rank") + (n > 1 ? "s " : " ") + ranks + (n > 1 ? " have" : " has") +
         " not started this call (#" + std::to_string(mine_.seq) + " " + call_kind_name(mine_.kind) +
         "): stopped, stuck, or making fewer calls";
}

Status CallCheck::require_all(transport::Clock::time_point deadline) {
  for (int r : ins_) GW_RETURN_IF_ERROR(require(r, deadline));
  return failure_;
}

Status CallCheck::finish(transport::Clock::time_point deadline) {
  GW_RETURN_IF_ERROR(require_all(deadline));  // sends this rank's descriptors too, if still unsent
  for (int r : ins_) {
    if (judged_[static_cast<size_t>(r)] == 0) {
      failure_ = internal_error("call #" + std::to_string(mine_.seq) + " (" + call_kind_name(mine_.kind) +
                                ") ended without judging the descriptor rank " + std::to_string(r) + " carries");
      return failure_;
    }
  }
  if (head_unsent_) {
    failure_ = internal_error("call #" + std::to_string(mine_.seq) + " (" + call_kind_name(mine_.kind) +
                              ") ended without sending its descriptor at the head of its first message");
    return failure_;
  }
  for (int r : outs_) GW_RETURN_IF_ERROR(tp_->wait(sends_[static_cast<size_t>(r)], deadline));
  active_ = false;
  return Status::ok();
}

}  // namespace gw::coll
