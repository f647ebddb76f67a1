#pragma once
// MPI between nodes when the job runs under an MPI launcher (internode_transport.hpp).
//
// `TCOLL_TORCH_INTERNODE` picks the engine of a group that spans nodes:
// - `auto` (default): MPI when every rank of the group was started by an MPI launcher of the
//   MPI the extension was built with (Open MPI's `mpirun` or `srun` with PMIx; MPICH's
//   Hydra for an MPICH build) in one job, otherwise Gloo;
// - `mpi`: MPI or an error naming the rank that cannot use it and why;
// - `gloo`: Gloo's send/recv always.
// The backend initialises MPI itself (MPI_THREAD_MULTIPLE: its engine thread calls MPI
// beside the caller's) unless the program did (mpi4py does, at MULTIPLE), and then
// finalises it at exit (tcoll_torch/__init__.py). The ranks of a group get a communicator
// of their own from MPI_COMM_WORLD (MPI_Comm_create_group: collective over the group only,
// as torch's new_group makes a backend only on its members), with the world ranks
// exchanged through the group's store.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <tcoll/transport/bootstrap.hpp>

#include "internode_transport.hpp"

#ifdef TCOLL_TORCH_MPI
#include <mpi.h>

#include <tcoll/transport/mpi/check.hpp>
#endif

namespace tcoll_torch::mpi_link {

/// The value of TCOLL_TORCH_INTERNODE ("auto" when unset); throws naming `rank` otherwise.
inline std::string internode_choice(int rank) {
  const char* v = std::getenv("TCOLL_TORCH_INTERNODE");
  const std::string choice = v && *v ? v : "auto";
  if (choice != "auto" && choice != "mpi" && choice != "gloo")
    throw tcoll::invalid_argument("TCOLL_TORCH_INTERNODE is \"" + choice +
                                      "\" on this rank; expected auto, mpi or gloo",
                                  rank);
  return choice;
}

/// Whether this extension can run MPI at all.
constexpr bool built_with_mpi() noexcept {
#ifdef TCOLL_TORCH_MPI
  return true;
#else
  return false;
#endif
}

#ifdef TCOLL_TORCH_MPI
/// The launcher's job identity (ranks of different jobs share no MPI_COMM_WORLD).
inline std::string launcher_job() {
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_KVS_NAME"})
    if (const char* v = std::getenv(name)) return std::string(name) + "=" + v;
  return {};
}

/// The number of processes the launcher started, where a launcher of the MPI this
/// extension links started this one (an Open MPI library under MPICH's Hydra would start
/// as a singleton of its own); 0 otherwise.
inline int launcher_world_size() {
#ifdef OMPI_MAJOR_VERSION
  const char* v = std::getenv("OMPI_COMM_WORLD_SIZE");
#else
  const char* v = std::getenv("PMI_SIZE");
#endif
  return v ? std::atoi(v) : 0;
}
#endif

/// True when this extension called MPI_Init_thread (so it finalises at exit).
inline bool& initialised_here() {
  static bool here = false;
  return here;
}

/// Makes MPI ready on this rank if it may serve as the inter-node engine of a group of
/// `group_size` ranks: initialises it at MPI_THREAD_MULTIPLE where nobody has and the group
/// is the launcher's whole job (MPI_Init waits for every process of the job; a sub-group
/// made first stays on Gloo). Returns this rank's MPI_COMM_WORLD rank, or -1 with `why`
/// saying what is missing.
inline int prepare_world_rank(int group_size, std::string& why) {
#ifndef TCOLL_TORCH_MPI
  why = "the extension was built without MPI (TCOLL_TORCH_MPI=0 or no MPI found)";
  return -1;
#else
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    why = "MPI was finalised already";
    return -1;
  }
  if (!initialized) {
    const int launched = launcher_world_size();
    if (launched == 0) {
      why = "not started by an MPI launcher (mpirun)";
      return -1;
    }
    if (launched != group_size) {
      why = "MPI is not initialised and the group (" + std::to_string(group_size) +
            " ranks) is not the launcher's whole job (" + std::to_string(launched) +
            " processes), which MPI_Init needs";
      return -1;
    }
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      why = "MPI_Init_thread failed";
      return -1;
    }
    initialised_here() = true;
  }
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level != MPI_THREAD_MULTIPLE) {
    why = "MPI runs below MPI_THREAD_MULTIPLE (initialise it with MPI_Init_thread at "
          "MPI_THREAD_MULTIPLE, or leave it to tcoll)";
    return -1;
  }
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
#endif
}

/// Collective over the group through its store: the MPI_COMM_WORLD rank of every rank of
/// the group, in group rank order, when MPI is to carry its inter-node messages; empty for
/// Gloo. TCOLL_TORCH_INTERNODE=mpi makes a rank that cannot use MPI an error on every rank,
/// naming it and why; so is a value that differs across ranks.
inline std::vector<int> world_ranks(c10d::Store& store, int rank, int size) {
  const std::string choice = internode_choice(rank);
  std::string why;
  const int world = choice == "gloo" ? -1 : prepare_world_rank(size, why);
  if (choice == "gloo") why = "TCOLL_TORCH_INTERNODE=gloo";
  std::string job;
#ifdef TCOLL_TORCH_MPI
  if (world >= 0) {
    int world_size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    job = launcher_job() + " size=" + std::to_string(world_size);
  }
#endif
  // one fixed-size record per rank: world rank, choice, job, reason
  constexpr std::size_t text = 240;
  std::vector<std::uint8_t> mine(4 + 3 * text, 0);
  std::memcpy(mine.data(), &world, 4);
  auto put = [&](std::size_t at, const std::string& s) {
    std::memcpy(mine.data() + 4 + at * text, s.data(), std::min(s.size(), text - 1));
  };
  put(0, choice);
  put(1, job);
  put(2, why);
  tcoll::store_bootstrap<c10d::Store> boot(store, rank, size, "tcoll/mpi");
  const std::vector<std::uint8_t> all = boot.allgather(mine);
  auto get = [&](int q, std::size_t at) {
    return std::string(reinterpret_cast<const char*>(all.data() + q * mine.size() + 4 + at * text));
  };
  std::vector<int> ranks(size);
  bool usable = true;
  int first_unusable = -1;
  std::string reason;
  for (int q = 0; q < size; ++q) {
    std::memcpy(&ranks[q], all.data() + q * mine.size(), 4);
    if (get(q, 0) != choice)
      throw tcoll::invalid_argument("TCOLL_TORCH_INTERNODE is \"" + choice + "\" here but \"" +
                                        get(q, 0) + "\" on rank " + std::to_string(q),
                                    rank, q);
    std::string no;
    if (ranks[q] < 0)
      no = get(q, 2);
    else if (get(q, 1) != get(0, 1))
      no = "it runs in another MPI job (" + get(q, 1) + ") than rank 0 (" + get(0, 1) + ")";
    if (!no.empty() && usable) usable = false, first_unusable = q, reason = no;
  }
  if (usable) {
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      usable = false, first_unusable = 0, reason = "two ranks have the same MPI rank";
  }
  if (usable) return ranks;
  if (choice == "mpi")
    throw tcoll::invalid_argument("TCOLL_TORCH_INTERNODE=mpi, but rank " +
                                      std::to_string(first_unusable) + " cannot use MPI: " + reason,
                                  rank, first_unusable);
  return {};
}

#ifdef TCOLL_TORCH_MPI
/// Collective over the ranks of `world_ranks` only: a communicator of them, ranked as listed.
inline MPI_Comm comm_of(const std::vector<int>& world_ranks, int rank) {
  MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, static_cast<int>(world_ranks.size()), world_ranks.data(), &group);
  // the tag only separates creations running at once on the same processes; torch makes
  // groups one after another in the same order on every rank
  constexpr int create_tag = 7119;
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, create_tag, &comm);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  tcoll::check_mpi(rc, "MPI_Comm_create_group", rank);
  return comm;
}
#endif

/// The transports between nodes of one group over MPI.
struct mpi_links {
  std::unique_ptr<internode_transport> flat;  ///< every rank of the group, ranked as the group
  std::unique_ptr<internode_transport> inter; ///< this local index on every node; null if none
};

/// Collective over the group's ranks (`world_ranks`, from `world_ranks()`): a communicator
/// of them for the flat collectives, and one per local index below the group's shards
/// across nodes (ranked by node) for the hierarchy's inter-node level. `inter_index` is
/// this rank's local index, or -1 where it takes no part in that level.
inline mpi_links connect([[maybe_unused]] const std::vector<int>& world_ranks,
                         [[maybe_unused]] int rank, [[maybe_unused]] int node,
                         [[maybe_unused]] int inter_index,
                         [[maybe_unused]] std::chrono::milliseconds timeout) {
  mpi_links links;
#ifdef TCOLL_TORCH_MPI
  tcoll::mpi_options options;
  options.timeout = timeout;
  MPI_Comm all = comm_of(world_ranks, rank);
  MPI_Comm across = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(all, inter_index >= 0 ? inter_index : MPI_UNDEFINED, node, &across);
  try {
    tcoll::check_mpi(rc, "MPI_Comm_split", rank);
    links.flat =
        std::make_unique<internode_transport>(std::make_unique<tcoll::mpi_transport>(all, options));
    if (across != MPI_COMM_NULL)
      links.inter = std::make_unique<internode_transport>(
          std::make_unique<tcoll::mpi_transport>(across, options));
  } catch (...) {
    if (across != MPI_COMM_NULL) MPI_Comm_free(&across);
    MPI_Comm_free(&all);
    throw;
  }
  if (across != MPI_COMM_NULL) MPI_Comm_free(&across); // the transports keep duplicates
  MPI_Comm_free(&all);
#else
  throw tcoll::invalid_argument("MPI ranks given, but the extension was built without MPI", rank);
#endif
  return links;
}

/// MPI_Finalize, where this extension initialised MPI and nobody finalised it.
inline void finalize_if_initialised_here() {
#ifdef TCOLL_TORCH_MPI
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (initialised_here() && !finalized) MPI_Finalize();
#endif
}

} // namespace tcoll_torch::mpi_link
