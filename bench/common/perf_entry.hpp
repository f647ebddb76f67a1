#pragma once
/// \file
/// The per-transport entry points of bench/allreduce_perf, each compiled in its own
/// translation unit (bench/perf_threads.cpp, bench/perf_mpi.cpp, bench/perf_shm.cpp).
#include <vector>

#include "perf_options.hpp"
#include "perf_report.hpp"

namespace tcoll {
class thread_transport;
class mpi_transport;
class shm_transport;
} // namespace tcoll

namespace tcoll::bench {
/// Runs every configured measurement on this rank; rank 0 appends the rows.
void run_all_threads(thread_transport& t, const perf_options& o, std::vector<row>& rows);
void run_all_mpi(mpi_transport& t, const perf_options& o, std::vector<row>& rows);
/// shm: `passthrough` runs as MPI_Allreduce on `native` (the same processes).
void run_all_shm(shm_transport& t, mpi_transport& native, const perf_options& o,
                 std::vector<row>& rows);
} // namespace tcoll::bench
