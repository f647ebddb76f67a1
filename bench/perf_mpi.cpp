// allreduce_perf's measurement loop instantiated for the MPI transport (with passthrough).
#include <tcoll/transport/mpi.hpp>

#include "common/perf_entry.hpp"
#include "common/perf_runner.hpp"

void tcoll::bench::run_all_mpi(mpi_transport& t, const perf_options& o, std::vector<row>& rows) {
  run_all(t, o, "mpi", rows);
}
