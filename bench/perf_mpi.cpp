// allreduce_perf's measurement loop instantiated for the MPI transport (with passthrough).
#include <tcoll/transport/mpi.hpp>

#include "common/perf_entry.hpp"
#include "common/perf_runner.hpp"

void tcoll::bench::run_all_mpi(mpi_transport& t, const perf_options& o, std::vector<row>& rows) {
  run_all(t, o, "mpi", rows);
}

void tcoll::bench::run_row_mpi(mpi_transport& t, const perf_options& o,
                               const std::string& algorithm, const std::string& dtype,
                               const std::string& op, std::size_t bytes, void* send, void* recv,
                               std::vector<row>& rows) {
  run_one(t, o, "mpi", algorithm, parse_dtype(dtype), parse_op(op), bytes, send, recv, rows,
          static_cast<mpi_transport*>(nullptr));
}
