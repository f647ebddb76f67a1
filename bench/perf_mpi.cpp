// allreduce_perf's measurement loop instantiated for the MPI transport (with passthrough).
#include <span>

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
  with_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::span<T> s(static_cast<T*>(send), bytes / sizeof(T)),
        r(static_cast<T*>(recv), bytes / sizeof(T));
    with_op(op, [&](auto op_tag) {
      run_one<T, decltype(op_tag)>(t, o, "mpi", algorithm, op, bytes, s, r, rows,
                                   static_cast<mpi_transport*>(nullptr));
    });
  });
}
