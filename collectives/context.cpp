#include "collectives/context.hpp"

namespace gw::coll {

transport::Op* OpArena::get(size_t count) {
  if (count > count_) {
    ops_.reset(new transport::Op[count]);
    count_ = count;
  }
  for (size_t i = 0; i < count; ++i) ops_[i].state.store(static_cast<int>(transport::OpState::kIdle));
  return ops_.get();
}

}  // namespace gw::coll
