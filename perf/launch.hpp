// How a perf tool gets its communicator: from the launcher's environment (mpirun, srun,
// torchrun), or with --np N by forking N local ranks that meet through a unique id.
#pragma once

#include "gradwire/gradwire.h"

namespace gw::perf {

// Returns the communicator of this process. With np > 0 the calling process becomes the
// launcher: it forks np ranks, each of which returns from here with its communicator, while
// the launcher waits for them and exits with the first failing status. Exits on error.
gw_comm_t launch(int np);

// Prints the library's last error with where, and exits 1, when r is not GW_SUCCESS.
void check(gw_result_t r, const char* where);

}  // namespace gw::perf
