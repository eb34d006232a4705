// Writes one line of each level to a few subsystems, after the once-per-process init
// (banner, unknown GW_* variables), so that check_log.py can read what GW_DEBUG* made of them.
#include "common/log.hpp"

int main() {
  gw::log::set_rank(3);
  gw::log::on_first_init();
  gw::log::on_first_init();  // once per process: the second call prints nothing
  GW_WARN(kColl, "probe warn coll");
  GW_INFO(kColl, "probe info coll");
  GW_INFO(kInit, "probe info init");
  GW_INFO(kTune, "probe info tune");
  GW_TRACE(kTransport, "probe trace transport");
  GW_WARN(kTune, "probe warn tune");
  return 0;
}
