// allreduce_perf -t node: the two-level machines of an MPI job (nodes of `--ranks-per-node`
// ranks, or the ranks that share memory) next to the flat algorithms over all ranks,
// interleaved per size in one job.
//  - `hierarchical` runs `hierarchical_options<X>` (X from `--inter`) on
//    `hierarchical<shm_transport, mpi_transport>` (`mpi_node_hierarchy`, `--intra shm`; its
//    rows are instantiated here) and on `hierarchical<mpi_transport, mpi_transport>`
//    (`--intra mpi`, bench/perf_node_mpi.cpp); rows are named `hierarchical/X`, their
//    transport `shm+mpi` or `mpi+mpi`.
//  - every other algorithm runs flat on `mpi_transport` over MPI_COMM_WORLD as with `-t mpi`
//    (bench/perf_mpi.cpp), `passthrough` being MPI_Allreduce.
// The barrier before each repetition and the reductions of times and wrong counts run on
// the flat transport, so every row is timed and checked the same way.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/perf_entry.hpp"
#include "common/perf_node.hpp"

namespace tcoll::bench {
namespace {

/// Rank 0 prints which ranks form each node.
void print_nodes(mpi_transport& world, const perf_options& o) {
  int node = 0; // the lowest rank of this rank's node
  if (o.ranks_per_node > 0) {
    node = world.rank() / o.ranks_per_node * o.ranks_per_node;
  } else {
    MPI_Comm local = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &local);
    int r = world.rank();
    MPI_Allreduce(&r, &node, 1, MPI_INT, MPI_MIN, local);
    MPI_Comm_free(&local);
  }
  std::vector<int> nodes(static_cast<std::size_t>(world.size()));
  MPI_Gather(&node, 1, MPI_INT, nodes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (world.rank() != 0) return;
  std::string text;
  for (std::size_t r = 0; r < nodes.size(); ++r) {
    const bool first = r == 0 || nodes[r] != nodes[r - 1];
    text += (first ? std::string(r ? "} {" : "{") : std::string(",")) + std::to_string(r);
  }
  std::string intra, inter;
  for (const auto& i : o.intra) intra += (intra.empty() ? "" : ", ") + i + "+mpi";
  for (const auto& i : o.inter) inter += (inter.empty() ? "" : ", ") + i;
  std::printf("# nodes (--ranks-per-node %d): %s}; hierarchical on %s, across nodes: %s\n",
              o.ranks_per_node, text.c_str(), intra.c_str(), inter.c_str());
  std::fflush(stdout);
}

} // namespace

void run_row_node(hierarchical<shm_transport, mpi_transport>& machine, mpi_transport& world,
                  const perf_options& o, const std::string& inter, const std::string& dtype,
                  const std::string& op, std::size_t bytes, void* send, void* recv,
                  std::vector<row>& rows) {
  node_row(machine, world, o, "shm+mpi", inter, dtype, op, bytes, send, recv, rows);
}

void run_all_node(mpi_transport& world, const mpi_options& mpi, const perf_options& o,
                  std::vector<row>& rows) {
  print_nodes(world, o);
  const bool hier =
      std::find(o.algorithms.begin(), o.algorithms.end(), "hierarchical") != o.algorithms.end();
  auto wanted = [&](const char* intra) {
    return hier && std::find(o.intra.begin(), o.intra.end(), intra) != o.intra.end();
  };
  std::unique_ptr<mpi_node_hierarchy> shm_mpi;
  if (wanted("shm")) {
    node_hierarchy_options n{.ranks_per_node = o.ranks_per_node, .intra = {}, .inter = mpi};
    n.intra.timeout = mpi.timeout;
    shm_mpi = std::make_unique<mpi_node_hierarchy>(MPI_COMM_WORLD, n);
  }
  std::unique_ptr<mpi_mpi_hierarchy> mpi_mpi;
  if (wanted("mpi")) mpi_mpi = std::make_unique<mpi_mpi_hierarchy>(world, o.ranks_per_node);

  // one pair of buffers for every element type (max_align_t: aligned for all of them)
  const std::size_t words = (std::max<std::size_t>(o.max_bytes, 8) + sizeof(std::max_align_t) - 1) /
                            sizeof(std::max_align_t);
  std::vector<std::max_align_t> send(words), recv(words);
  for (const auto& dtype : o.dtypes) {
    const std::size_t elem = size_of(parse_dtype(dtype));
    for (const auto& op : o.ops)
      for (std::size_t bytes : sizes(o, elem))
        for (const auto& aname : o.algorithms) {
          if (aname != "hierarchical") {
            run_row_mpi(world, o, aname, dtype, op, bytes, send.data(), recv.data(), rows);
            continue;
          }
          for (const auto& intra : o.intra)
            for (const auto& inter : o.inter) {
              if (intra == "shm")
                run_row_node(shm_mpi->get(), world, o, inter, dtype, op, bytes, send.data(),
                             recv.data(), rows);
              else
                run_row_node(mpi_mpi->get(), world, o, inter, dtype, op, bytes, send.data(),
                             recv.data(), rows);
            }
        }
  }
}

} // namespace tcoll::bench
