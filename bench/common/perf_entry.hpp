#pragma once
/// \file
/// The per-transport entry points of bench/allreduce_perf, each compiled in its own
/// translation unit (bench/perf_threads.cpp, bench/perf_mpi.cpp, bench/perf_shm.cpp,
/// bench/perf_node.cpp and bench/perf_node_mpi.cpp).
#include <cstddef>
#include <string>
#include <vector>

#include "perf_options.hpp"
#include "perf_report.hpp"

namespace tcoll {
class thread_transport;
class mpi_transport;
class shm_transport;
struct mpi_options;
} // namespace tcoll

namespace tcoll::bench {
/// Runs every configured measurement on this rank; rank 0 appends the rows.
void run_all_threads(thread_transport& t, const perf_options& o, std::vector<row>& rows);
void run_all_mpi(mpi_transport& t, const perf_options& o, std::vector<row>& rows);
/// shm: `passthrough` runs as MPI_Allreduce on `native` (the same processes).
void run_all_shm(shm_transport& t, mpi_transport& native, const perf_options& o,
                 std::vector<row>& rows);
/// node: `hierarchical` on the two-level machines of `o.intra` (built over MPI_COMM_WORLD
/// with `o.ranks_per_node`; their MPI transports take `mpi`), the flat algorithms and
/// passthrough on `world` (MPI_COMM_WORLD), interleaved per size (bench/perf_node.cpp).
void run_all_node(mpi_transport& world, const mpi_options& mpi, const perf_options& o,
                  std::vector<row>& rows);
/// One row of the MPI transport for `run_all_node`: `algorithm` on `dtype` and `op` at
/// `bytes`; `send` and `recv` hold at least `bytes`, aligned for every element type.
void run_row_mpi(mpi_transport& t, const perf_options& o, const std::string& algorithm,
                 const std::string& dtype, const std::string& op, std::size_t bytes, void* send,
                 void* recv, std::vector<row>& rows);
} // namespace tcoll::bench
