// The GW_* environment variables gradwire knows, so that a misspelt one (GW_DEBUG_SUBSYSTEM,
// GW_TIMEOUT) is reported instead of silently doing nothing.
#pragma once

#include <string>
#include <vector>

namespace gw::env {

// Whether name (e.g. "GW_DEBUG") is read by the library, or by gradwire's own scripts and
// tests (those are set around library processes and must not draw a warning).
bool is_known(const std::string& name);
// The GW_* names in this process's environment that are not known, in environment order.
std::vector<std::string> unknown_in_environment();
// The known name closest to name (one edit or a missing/extra suffix), or "".
std::string closest_known(const std::string& name);

}  // namespace gw::env
