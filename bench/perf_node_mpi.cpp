// allreduce_perf -t node: the rows of `hierarchical<mpi_transport, mpi_transport>` (MPI
// inside and across the nodes), instantiated here; the driver is bench/perf_node.cpp.
#include "common/perf_node.hpp"

void tcoll::bench::run_row_node(hierarchical<mpi_transport, mpi_transport>& machine,
                                mpi_transport& world, const perf_options& o,
                                const std::string& inter, const std::string& dtype,
                                const std::string& op, std::size_t bytes, void* send, void* recv,
                                std::vector<row>& rows) {
  node_row(machine, world, o, "mpi+mpi", inter, dtype, op, bytes, send, recv, rows);
}
