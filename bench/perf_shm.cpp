// allreduce_perf's measurement loop instantiated for the shared-memory transport; the
// passthrough rows are MPI_Allreduce over the same processes, interleaved per size.
#include <tcoll/transport/mpi.hpp>
#include <tcoll/transport/shm.hpp>

#include "common/perf_entry.hpp"
#include "common/perf_runner.hpp"

void tcoll::bench::run_all_shm(shm_transport& t, mpi_transport& native, const perf_options& o,
                               std::vector<row>& rows) {
  run_all(t, o, o.registered ? "shm-registered" : "shm", rows, &native);
}
