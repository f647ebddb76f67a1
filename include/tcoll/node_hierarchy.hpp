#pragma once
/// \file
/// `mpi_node_hierarchy`: the two-level machine of an MPI program, built in one call. Inside
/// a node the ranks talk through shared memory (`shm_transport`); between nodes the ranks
/// with the same local index talk through MPI (`mpi_transport`). It owns both transports
/// and hands out the `hierarchical<shm_transport, mpi_transport>` that tcoll's hierarchical
/// allreduce, non-blocking collectives and the overlap scheduler take: the default
/// hierarchical pairing for MPI programs.
///
///   tcoll::mpi_node_hierarchy machine(MPI_COMM_WORLD);
///   tcoll::allreduce(machine.get(), grad, grad, n, tcoll::sum_op{},
///                    tcoll::hierarchical_options<tcoll::ring>{});
///
/// `ranks_per_node` emulates several nodes on one machine (blocks of consecutive ranks),
/// which is how the tests and `scripts/emulated_cluster.sh` run it.
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "algorithm/hierarchical.hpp"
#include "collectives.hpp"
#include "core/error.hpp"
#include "transport/mpi.hpp"
#include "transport/shm.hpp"

namespace tcoll {

/// Knobs of `mpi_node_hierarchy`.
struct node_hierarchy_options {
  /// 0: a node is the set of ranks that share memory (`MPI_COMM_TYPE_SHARED`). n > 0:
  /// consecutive blocks of n ranks play one node each (the last block may be smaller);
  /// every block must still share memory.
  int ranks_per_node = 0;
  /// The shared-memory transport inside a node. With `ranks_per_node` > 0 and more ranks
  /// sharing the machine than it has cores, its waits yield at once (`spins_before_yield`
  /// = 0): the other emulated nodes need the cores a spinning rank would hold, which
  /// `shm_transport` cannot see from its own team's size.
  shm_options intra{};
  mpi_options inter{};                    ///< the MPI transport between nodes
  hierarchical_machine_options machine{}; ///< the machine's own knobs (its all-to-all's route)
};

/// Shared memory inside each node, MPI between nodes (see the file comment). Collective
/// over `comm` to construct; not copyable or movable (the hierarchy points into it).
class mpi_node_hierarchy {
public:
  explicit mpi_node_hierarchy(MPI_Comm comm, node_hierarchy_options options = {}) {
    int rank = 0, size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (options.ranks_per_node < 0)
      throw invalid_argument("mpi_node_hierarchy: options.ranks_per_node must be >= 0, got " +
                                 std::to_string(options.ranks_per_node),
                             rank);
    MPI_Comm node = MPI_COMM_NULL;
    const int code =
        options.ranks_per_node == 0
            ? MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node)
            : MPI_Comm_split(comm, rank / options.ranks_per_node, rank, &node);
    if (code != MPI_SUCCESS)
      throw transport_error("mpi_node_hierarchy: splitting the communicator into nodes failed",
                            rank);
    int local = 0, local_size = 0;
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &local_size);
    if (options.ranks_per_node > 0) {
      MPI_Comm machine = MPI_COMM_NULL;
      int machine_size = 0;
      if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &machine) ==
          MPI_SUCCESS) {
        MPI_Comm_size(machine, &machine_size);
        MPI_Comm_free(&machine);
      }
      if (static_cast<unsigned>(machine_size) > std::max(1u, std::thread::hardware_concurrency()))
        options.intra.spins_before_yield = 0;
    }
    // the world rank of every rank of each level, so that errors name world ranks
    hierarchy_shape shape{rank, size, 0};
    shape.intra_world_ranks.resize(static_cast<std::size_t>(local_size));
    MPI_Allgather(&rank, 1, MPI_INT, shape.intra_world_ranks.data(), 1, MPI_INT, node);
    try {
      intra_ = std::make_unique<shm_transport>(node, options.intra);
    } catch (...) {
      MPI_Comm_free(&node);
      throw;
    }
    MPI_Comm_free(&node);
    // Local ranks below the smallest node size form the inter-node communicators (one per
    // local index, nodes in rank order); the others never talk across nodes.
    int shards = 0;
    MPI_Allreduce(&local_size, &shards, 1, MPI_INT, MPI_MIN, comm);
    MPI_Comm across = MPI_COMM_NULL;
    MPI_Comm_split(comm, local < shards ? local : MPI_UNDEFINED, rank, &across);
    if (across != MPI_COMM_NULL) {
      int nodes = 0;
      MPI_Comm_size(across, &nodes);
      shape.inter_world_ranks.resize(static_cast<std::size_t>(nodes));
      MPI_Allgather(&rank, 1, MPI_INT, shape.inter_world_ranks.data(), 1, MPI_INT, across);
      inter_ = std::make_unique<mpi_transport>(across, options.inter);
      MPI_Comm_free(&across);
    }
    shape.shards = shards;
    // every group's world ranks in local order, groups ordered by their leader's world rank
    // (the order of the leaders' communicator across nodes)
    std::vector<int> leader_local{shape.intra_world_ranks.front(), local};
    std::vector<int> all(2 * static_cast<std::size_t>(size));
    MPI_Allgather(leader_local.data(), 2, MPI_INT, all.data(), 2, MPI_INT, comm);
    shape.groups = groups_from_leaders(all);
    machine_.emplace(*intra_, inter_.get(), std::move(shape), options.machine);
  }
  mpi_node_hierarchy(const mpi_node_hierarchy&) = delete;
  mpi_node_hierarchy& operator=(const mpi_node_hierarchy&) = delete;
  /// Stops the transports' engines before the machine goes: a hierarchical collective
  /// queued on the node transport's engine uses the machine until it finishes.
  ~mpi_node_hierarchy() {
    if (intra_) intra_->collectives().detach();
    if (inter_) inter_->collectives().detach();
  }

  /// The two-level machine for `allreduce`, `iallreduce` and `overlap_scheduler`.
  hierarchical<shm_transport, mpi_transport>& get() noexcept { return *machine_; }
  shm_transport& intra() noexcept { return *intra_; }
  /// Null on ranks whose local index is at least the smallest node's size.
  mpi_transport* inter() noexcept { return inter_.get(); }
  int rank() const noexcept { return machine_->rank(); }
  int size() const noexcept { return machine_->size(); }

private:
  std::unique_ptr<shm_transport> intra_;
  std::unique_ptr<mpi_transport> inter_;
  std::optional<hierarchical<shm_transport, mpi_transport>> machine_;
};

} // namespace tcoll
