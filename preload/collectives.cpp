/// \file
/// libtcoll_mpi.so: MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast, MPI_Reduce,
/// MPI_Alltoall, MPI_Gather, MPI_Scatter and the uneven MPI_Reduce_scatter, MPI_Allgatherv,
/// MPI_Alltoallv, MPI_Gatherv and MPI_Scatterv through tcoll, over shared memory where a
/// communicator's ranks share one node.
#include "equal_blocks.hpp"
#include "prologue.hpp"
#include "tcoll_mpi.hpp"
#include "v_blocks.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <vector>

#undef MPI_Reduce_scatter_block
#undef MPI_Allgather
#undef MPI_Reduce_scatter
#undef MPI_Allgatherv
#undef MPI_Alltoall
#undef MPI_Gather
#undef MPI_Scatter
#undef MPI_Alltoallv
#undef MPI_Gatherv
#undef MPI_Scatterv
#undef MPI_Bcast
#undef MPI_Reduce
#undef MPI_Barrier

using namespace tcoll::preload;

namespace tcoll::preload {

/// `Query(comm)` (PMPI_Comm_rank or PMPI_Comm_size), whose answer on MPI_COMM_SELF is `self`
/// and on the world never changes: asked once there (each query takes MPICH's global lock at
/// MPI_THREAD_MULTIPLE); on other communicators what `facts_of` remembers (`Fact`).
template <int (*Query)(MPI_Comm, int*), int comm_facts::*Fact>
int comm_query(MPI_Comm comm, int self) {
  if (comm == MPI_COMM_SELF) return self;
  static const int world = [] {
    int v = 0;
    Query(MPI_COMM_WORLD, &v);
    return v;
  }();
  if (comm == MPI_COMM_WORLD) return world;
  return facts_of(comm).*Fact;
}

int comm_rank(MPI_Comm comm) {
  return comm_query<PMPI_Comm_rank, &comm_facts::rank>(comm, 0);
}
int comm_size(MPI_Comm comm) {
  return comm_query<PMPI_Comm_size, &comm_facts::size>(comm, 1);
}

/// The built-in choice for collective `c` (not allreduce) moving `bytes` on `P` ranks that
/// share one node: tcoll's algorithm over shm_transport in the ranges of `settings` and
/// `settings::shm_choice` (the collective area for bcast, reduce, reduce_scatter_block,
/// allgather on more than 2 ranks and barrier, then the binomial tree or the ring; MPI_Bcast
/// and MPI_Reduce on 2 ranks with a CPU each in the area at every size, on 2 ranks sharing
/// CPUs only up to `shm_bcast_two_up_to_bytes` / `shm_reduce_two_up_to_bytes`), MPI's own
/// collective elsewhere. Measured over shared memory
/// against Open MPI 4.1.4 with its default cross-memory attach and MPICH 4.0.2 (docs/benchmarks.md,
/// "Against MPICH and Open MPI at their defaults"; the thresholds come from the superseded tables
/// listed under "Earlier preload tables"; bcast and reduce below 512 B: "Small bcast and reduce
/// in the area"): Open MPI is faster for MPI_Reduce from 64 KiB on more than 2 ranks.
/// MPI_Allgather on 2 ranks: the area up to `shm_allgather_two_up_to_bytes`.
algorithm_id shm_collective_choice(coll c, std::size_t bytes, int P) {
  const settings& s = config();
  switch (c) {
  case coll::bcast: {
    // on 2 ranks with a CPU each the area's broadcast goes in pieces and wins at every size
    const bool own_cpus = shm_transport::ranks_have_cpus(P);
    return bytes < s.shm_bcast_from_bytes ||
                   (P == 2 && !own_cpus && bytes > s.shm_bcast_two_up_to_bytes)
               ? algorithm_id::passthrough
               : s.shm_choice.choose_broadcast(bytes, P, own_cpus);
  }
  case coll::reduce: {
    // on 2 ranks with a CPU each the area's reduce goes in pieces and wins at every size
    const bool own_cpus = shm_transport::ranks_have_cpus(P);
    if (bytes < s.shm_reduce_from_bytes ||
        (P == 2 && !own_cpus && bytes > s.shm_reduce_two_up_to_bytes))
      return algorithm_id::passthrough;
    if (s.shm_choice.choose_reduce(bytes, P, own_cpus) == algorithm_id::in_segment)
      return algorithm_id::in_segment;
    return bytes <= s.shm_reduce_up_to_bytes ? algorithm_id::binomial_tree
                                             : algorithm_id::passthrough;
  }
  case coll::allgather:
    if (P == 2) // the collective area up to its 2-rank bound, MPI's own above
      return bytes <= s.shm_allgather_two_up_to_bytes ? algorithm_id::in_segment
                                                      : algorithm_id::passthrough;
    if (s.shm_choice.choose_allgather(bytes) == algorithm_id::in_segment)
      return algorithm_id::in_segment;
    [[fallthrough]];
  case coll::allgatherv:
    return P > 2 && bytes >= s.shm_allgather_from_bytes ? algorithm_id::ring
                                                        : algorithm_id::passthrough;
  case coll::reduce_scatter_block:
    if (s.shm_choice.choose_reduce_scatter(bytes) == algorithm_id::in_segment)
      return algorithm_id::in_segment;
    [[fallthrough]];
  case coll::reduce_scatter:
    return bytes >= (P == 2 ? s.shm_reduce_scatter_two_from_bytes : s.shm_reduce_scatter_from_bytes)
               ? algorithm_id::ring
               : algorithm_id::passthrough;
  case coll::alltoall: // the library's choice by the block's size, the preload's area bounds
    return bytes >= (P == 2 ? s.shm_alltoall_two_from_bytes : s.shm_alltoall_from_bytes) &&
                   bytes <= (P == 2 ? s.shm_alltoall_two_up_to_bytes : s.shm_alltoall_up_to_bytes)
               ? s.shm_alltoall_choice.choose(bytes / static_cast<std::size_t>(P), P, true)
               : algorithm_id::passthrough;
  case coll::gather:
    return bytes >= s.shm_gather_from_bytes &&
                   bytes <= (P == 2 ? s.shm_gather_two_up_to_bytes : s.shm_gather_up_to_bytes)
               ? algorithm_id::linear
               : algorithm_id::passthrough;
  case coll::scatter:
    return bytes >= s.shm_scatter_from_bytes &&
                   bytes <= (P == 2 ? s.shm_scatter_two_up_to_bytes : s.shm_scatter_up_to_bytes)
               ? algorithm_id::linear
               : algorithm_id::passthrough;
  // the uneven forms: one choice for every size (`per_rank_size`), from the settings only
  case coll::alltoallv:
    return s.shm_alltoallv ? algorithm_id::pairwise_exchange : algorithm_id::passthrough;
  case coll::gatherv:
    return s.shm_gatherv ? algorithm_id::linear : algorithm_id::passthrough;
  case coll::scatterv:
    return s.shm_scatterv ? algorithm_id::linear : algorithm_id::passthrough;
  case coll::barrier:
    return s.shm_barrier ? algorithm_id::in_segment : algorithm_id::passthrough;
  default:
    return algorithm_id::passthrough;
  }
}

} // namespace tcoll::preload

namespace {

/// The guard of a wrapper that inspects its per-rank counts before it picks its form
/// (MPI_Reduce_scatter, MPI_Allgatherv): MPI active, a usable communicator and arguments.
/// True (the fallback counted) where MPI runs the call.
bool falls_back_before_counts(coll c, MPI_Comm comm, bool args_ok) {
  if (!mpi_active()) {
    count_fallback(c, fallback::not_initialized);
    return true;
  }
  if (const std::optional<fallback> why = communicator_fallback(comm, args_ok)) {
    count_fallback(c, *why);
    return true;
  }
  return false;
}

/// Runs `f(communicator)` for algorithm `a`: on the communicator's two-level machine for
/// `hierarchical` (shared memory inside the nodes unless TCOLL_SHM=0), else on its
/// shared-memory transport where it has one (TCOLL_SHM=1 and every rank on this node), else
/// on its MPI transport (shared memory counted for TCOLL_DEBUG). Collective on a
/// communicator's first call, like the call itself.
template <class F>
void on_transport(coll c, comm_state& s, algorithm_id a, F&& f) {
  if (a == algorithm_id::hierarchical) {
    if (s.on_hierarchy(f)) count_shared_memory(c);
    return;
  }
  if (tcoll::shm_transport* node = s.shared_memory()) {
    count_shared_memory(c);
    f(*node);
  } else {
    f(s.transport());
  }
}

/// `on_transport` with algorithm `a` of collective `C` as its object
/// (`tcoll::visit_algorithm`, the library's one dispatch): `f(communicator, algorithm)`, the
/// first of `knobs` of the algorithm's type carrying its knobs. A hierarchy runs its own form
/// whatever it is given: it gets the table's first algorithm of `C`.
template <collective C, class F, class... Knobs>
void on_transport_as(coll c, comm_state& s, algorithm_id a, F&& f, const Knobs&... knobs) {
  on_transport(c, s, a, [&](auto& t) {
    tcoll::visit_algorithm<C>(
        a == algorithm_id::hierarchical ? tcoll::algorithms_of(C)[0] : a,
        [&](const auto& algo) { f(t, algo); }, knobs...);
  });
}

/// `ruled` (a rule's choice, or the built-in choice over MPI), or, where no rule covers
/// `bytes` and the communicator's `P` ranks share one node, `shm_collective_choice`.
/// Whether they share a node is looked up only where the two choices differ; that lookup is
/// collective on the communicator's first call, like one_node_choice in allreduce.cpp (every
/// rank makes the same call with the same size, so every rank reaches it).
algorithm_id one_node_collective_choice(coll c, MPI_Comm comm, std::size_t bytes, int P,
                                        algorithm_id ruled) {
  if (!config().shm || chosen_by_rule(c, bytes)) return ruled;
  const algorithm_id node = shm_collective_choice(c, bytes, P);
  if (node == ruled) return ruled;
  return state_of(comm).shared_memory() ? node : ruled;
}

/// The one-node choice of a wrapper of `c` on `comm` for `intercept`; `P` is read when the
/// choice is made (after the wrapper's measure has set it).
auto node_choice_of(coll c, MPI_Comm comm, const int& P) {
  return [c, comm, &P](std::size_t bytes, algorithm_id ruled) {
    return one_node_collective_choice(c, comm, bytes, P, ruled);
  };
}

} // namespace

namespace {

/// MPI_Reduce_scatter_block and MPI_Reduce_scatter_block_c (`Count` int or MPI_Count), and
/// MPI_Reduce_scatter(_c) with `counts` (its recvcounts, where they differ; `recvcount` is
/// then 0); `pmpi()` hands the call to MPI.
template <class Count, class Pmpi>
int reduce_scatter_block_call(const void* sendbuf, void* recvbuf, Count recvcount,
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, Pmpi pmpi,
                              coll c = coll::reduce_scatter_block, const Count* counts = nullptr) {
  reduction r;
  int P = 0;
  std::size_t n = 0;              // this rank's block (elements)
  std::vector<std::size_t> sizes; // every block, where they differ
  return intercept<Count>(
      c, comm, pmpi,
      [&]() -> measured_call {
        if (auto why = communicator_fallback(comm, recvcount >= 0 && sendbuf && recvbuf))
          return to_mpi(*why);
        r = classify_reduction(datatype, op);
        if (!r.ok()) return to_mpi(r.why);
        P = comm_size(comm);
        n = static_cast<std::size_t>(recvcount);
        std::size_t total = n * P; // every block (elements)
        if (counts) {
          long long sum = 0;
          bool fits = true;
          for (int q = 0; q < P && fits; ++q) {
            fits = counts[q] >= 0 &&
                   !__builtin_add_overflow(sum, static_cast<long long>(counts[q]), &sum);
            if (fits) sizes.push_back(static_cast<std::size_t>(counts[q]));
          }
          if (!fits || !count_fits(sum)) return to_mpi(fallback::arguments);
          n = sizes[static_cast<std::size_t>(comm_rank(comm))];
          total = static_cast<std::size_t>(sum);
        } else if (!count_fits(recvcount, P)) {
          return to_mpi(fallback::arguments);
        }
        return {.bytes = total * r.size, .repeatable = counts == nullptr};
      },
      node_choice_of(c, comm, P),
      [&](algorithm_id a, std::size_t bytes) {
        comm_state& s = state_of(comm);
        const void* in = sendbuf;
        if (sendbuf == MPI_IN_PLACE) { // the input is recvbuf's P blocks; the result its first
          std::byte* copy = s.scratch_bytes(bytes);
          std::memcpy(copy, recvbuf, bytes);
          in = copy;
        }
        if (counts)
          on_transport(c, s, a, [&](auto& t) {
            dispatch(r, [&]<class T>(const auto& o) {
              tcoll::reduce_scatterv(t, static_cast<const T*>(in), static_cast<T*>(recvbuf),
                                     std::span<const std::size_t>(sizes), o);
            });
          });
        else
          on_transport_as<collective::reduce_scatter>(c, s, a, [&](auto& t, const auto& algo) {
            dispatch(r, [&]<class T>(const auto& o) {
              tcoll::reduce_scatter(t, static_cast<const T*>(in), static_cast<T*>(recvbuf), n, o,
                                    algo);
            });
          });
      },
      {counts ? MPI_COMM_NULL : comm,
       {recvcount, 0},
       {datatype, MPI_DATATYPE_NULL},
       op,
       0,
       buffer_flags(sendbuf, recvbuf)});
}

} // namespace

/// MPI_Reduce_scatter_block through tcoll's ring (reduction types and ops as MPI_Allreduce).
TCOLL_PRELOAD_EXPORT int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                                                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return reduce_scatter_block_call(sendbuf, recvbuf, recvcount, datatype, op, comm, [&] {
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
  });
}

#if TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's MPI_Reduce_scatter_block_c: the same path as MPI_Reduce_scatter_block.
TCOLL_PRELOAD_EXPORT int MPI_Reduce_scatter_block_c(const void* sendbuf, void* recvbuf,
                                                    MPI_Count recvcount, MPI_Datatype datatype,
                                                    MPI_Op op, MPI_Comm comm) {
  return reduce_scatter_block_call(sendbuf, recvbuf, recvcount, datatype, op, comm, [&] {
    return PMPI_Reduce_scatter_block_c(sendbuf, recvbuf, recvcount, datatype, op, comm);
  });
}
#endif

namespace {

/// MPI_Allgather and MPI_Alltoall (`C`) and their `_c` forms (`Count` int or MPI_Count), and
/// MPI_Allgatherv with equal blocks in rank order (`c`); `pmpi()` hands the call to MPI. The
/// path is chosen from the block's signature bytes (recvcount x the size of recvtype), which
/// every rank shares whatever datatypes it passes: blocks move as bytes, and a rank whose
/// datatype is derived or not contiguous packs its send blocks (into its place among the
/// received ones, or all of them for an all-to-all) and unpacks its receive blocks locally
/// around the collective (equal_blocks.hpp). (Until 2026-12-03 such a rank handed its
/// MPI_Alltoall to MPI while the others ran tcoll's: a signature-matching program with a
/// derived type on one rank hung.)
template <collective C, class Count, class Pmpi>
int blocks_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                Count recvcount, MPI_Datatype recvtype, MPI_Comm comm, Pmpi pmpi,
                coll c = C == collective::allgather ? coll::allgather : coll::alltoall) {
  static_assert(C == collective::allgather || C == collective::alltoall);
  constexpr bool gathers = C == collective::allgather;
  block_call m;
  return intercept<Count>(
      c, comm, pmpi,
      [&]() -> measured_call {
        m = measure_block_call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                               true);
        if (m.why) return to_mpi(*m.why);
        return {.bytes = m.bytes, .repeatable = m.recv_direct() && m.send_direct()};
      },
      node_choice_of(c == coll::allgatherv ? coll::allgather : c, comm, m.P),
      [&](algorithm_id a, std::size_t bytes) {
        comm_state& s = state_of(comm);
        if (!m.recv_direct() || !m.send_direct()) count_packed(c);
        // the received blocks, contiguous: the user's buffer itself or scratch to unpack from
        auto* out = m.recv_direct() ? static_cast<unsigned char*>(recvbuf)
                                    : reinterpret_cast<unsigned char*>(s.scratch_bytes(bytes));
        const unsigned char* in = gathers ? allgather_input(sendbuf, sendcount, sendtype, recvbuf,
                                                            recvcount, recvtype, m, s.rank, out)
                                          : alltoall_input(sendbuf, sendcount, sendtype, recvbuf,
                                                           recvcount, recvtype, m, out);
        on_transport_as<C>(c, s, a, [&](auto& t, const auto& algo) {
          if constexpr (gathers)
            tcoll::allgather(t, in, out, m.block, algo);
          else
            tcoll::alltoall(t, in, out, m.block, algo);
        });
        if (!m.recv_direct())
          unpack_blocks(reinterpret_cast<const std::byte*>(out), m.P, m.block, recvbuf, recvcount,
                        recvtype);
      },
      send_recv_key(comm, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype));
}

} // namespace

/// MPI_Allgather through tcoll's ring, moved as bytes. The path is chosen from the block's
/// signature bytes (recvcount x the size of recvtype), which every rank of a matching call
/// shares whatever datatypes each uses; a rank whose send or receive datatype is derived or
/// not contiguous packs its block (or unpacks the result) locally around the collective.
TCOLL_PRELOAD_EXPORT int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                       void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                       MPI_Comm comm) {
  if (recvcount == 0 && empty_call_to_mpi(coll::allgather, comm))
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return blocks_call<collective::allgather>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, [&] {
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
      });
}

#if TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's MPI_Allgather_c: the same path as MPI_Allgather.
TCOLL_PRELOAD_EXPORT int MPI_Allgather_c(const void* sendbuf, MPI_Count sendcount,
                                         MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,
                                         MPI_Datatype recvtype, MPI_Comm comm) {
  if (recvcount == 0 && empty_call_to_mpi(coll::allgather, comm))
    return PMPI_Allgather_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return blocks_call<collective::allgather>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, [&] {
        return PMPI_Allgather_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
      });
}
#endif

namespace {

/// MPI_Reduce_scatter and MPI_Reduce_scatter_c: every rank's block of the same size (the
/// counts are an argument all ranks share) runs as MPI_Reduce_scatter_block, uneven blocks
/// as tcoll's reduce_scatterv.
template <class Count, class Pmpi>
int reduce_scatter_call(const void* sendbuf, void* recvbuf, const Count recvcounts[],
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, Pmpi pmpi) {
  constexpr coll c = coll::reduce_scatter;
  if (falls_back_before_counts(c, comm, recvcounts != nullptr)) return pmpi();
  const long long block = common_count(recvcounts, comm_size(comm));
  if (block < 0)
    return reduce_scatter_block_call(sendbuf, recvbuf, Count{0}, datatype, op, comm, pmpi, c,
                                     recvcounts);
  return reduce_scatter_block_call(sendbuf, recvbuf, static_cast<Count>(block), datatype, op, comm,
                                   pmpi, c);
}

/// MPI_Allgatherv and MPI_Allgatherv_c with blocks of their own sizes, or laid out out of
/// rank order, through tcoll's allgatherv on bytes. The path is chosen from the blocks'
/// signature bytes (recvcounts x the size of recvtype), which every rank shares; each rank's
/// displacements are its own. A rank whose receive datatype is derived or not contiguous
/// gathers into packed scratch and unpacks every block; a derived send datatype is packed.
/// Blocks of one size choose as MPI_Allgather does, as the ranks whose blocks lie in rank
/// order do (allgatherv_call): where that is the collective area, the blocks are gathered
/// in rank order (into scratch where this rank's lie otherwise) and copied to their places;
/// uneven blocks never take the area (a rule naming it runs the ring).
template <class Count, class Displ, class Pmpi>
int allgatherv_blocks_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype,
                           void* recvbuf, const Count recvcounts[], const Displ displs[],
                           MPI_Datatype recvtype, MPI_Comm comm, Pmpi pmpi) {
  constexpr coll c = coll::allgatherv;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  int P = 0, rank = 0;
  std::size_t rsize = 0, ssize = 0;
  std::vector<std::size_t> sizes; // bytes of each block
  bool equal = false;             // every block of one size
  return intercept<Count>(
      c, comm, pmpi,
      [&]() -> measured_call { // the communicator and pointers: checked by allgatherv_call
        P = comm_size(comm);
        rank = comm_rank(comm);
        const auto own = static_cast<std::size_t>(rank);
        const long long element = signature_bytes(1, recvtype);
        sizes.assign(static_cast<std::size_t>(P), 0);
        long long total = 0;
        bool fits = element >= 0;
        for (int q = 0; q < P && fits; ++q) {
          long long b = 0;
          fits = recvcounts[q] >= 0 &&
                 !__builtin_mul_overflow(static_cast<long long>(recvcounts[q]), element, &b) &&
                 !__builtin_add_overflow(total, b, &total);
          if (fits) sizes[static_cast<std::size_t>(q)] = static_cast<std::size_t>(b);
        }
        rsize = contiguous_size(recvtype);
        ssize = in_place ? rsize : contiguous_size(sendtype);
        const long long send_signature = in_place ? static_cast<long long>(sizes[own])
                                         : ssize  ? static_cast<long long>(ssize) * sendcount
                                                  : signature_bytes(sendcount, sendtype);
        if (!fits || !count_fits(total) || send_signature != static_cast<long long>(sizes[own]))
          return to_mpi(fallback::arguments); // MPI reports the bad type or the mismatch
        equal = std::all_of(sizes.begin(), sizes.end(),
                            [&](std::size_t b) { return b == sizes.front(); });
        return {static_cast<std::size_t>(total)};
      },
      [&](std::size_t bytes, algorithm_id ruled) {
        if (equal) return one_node_collective_choice(coll::allgather, comm, bytes, P, ruled);
        const algorithm_id a = one_node_collective_choice(c, comm, bytes, P, ruled);
        return a == algorithm_id::in_segment ? algorithm_id::ring : a;
      },
      [&](algorithm_id a, std::size_t bytes) {
        comm_state& s = state_of(comm);
        const auto own = static_cast<std::size_t>(rank);
        using byte = unsigned char;
        MPI_Aint lb = 0, extent = static_cast<MPI_Aint>(rsize);
        if (rsize == 0) PMPI_Type_get_extent(recvtype, &lb, &extent);
        const auto block_at = [&](int q) {
          return static_cast<char*>(recvbuf) + static_cast<MPI_Aint>(displs[q]) * extent;
        };
        std::vector<std::size_t> at(static_cast<std::size_t>(P)); // where each block lies
        byte* out = nullptr;
        if (rsize != 0) { // straight into recvbuf, from its lowest block (displacements < 0 too)
          Displ lowest = displs[0];
          for (int q = 1; q < P; ++q) lowest = std::min(lowest, displs[q]);
          out = reinterpret_cast<byte*>(block_at(0)) -
                static_cast<MPI_Aint>(displs[0] - lowest) * extent;
          for (int q = 0; q < P; ++q)
            at[static_cast<std::size_t>(q)] =
                static_cast<std::size_t>(static_cast<MPI_Aint>(displs[q] - lowest) * extent);
        } else { // packed in rank order into scratch, unpacked below
          count_packed(c);
          out = reinterpret_cast<byte*>(s.scratch_bytes(bytes));
          std::size_t next = 0;
          for (std::size_t q = 0; q < at.size(); ++q) {
            at[q] = next;
            next += sizes[q];
          }
        }
        byte* mine = out + at[own];
        const byte* in = mine;
        if (in_place) {
          if (rsize == 0)
            pack_local(block_at(rank), recvcounts[rank], recvtype,
                       reinterpret_cast<std::byte*>(mine), sizes[own]);
        } else if (ssize != 0 && rsize != 0) {
          in = static_cast<const byte*>(sendbuf);
        } else if (ssize != 0) {
          std::memcpy(mine, sendbuf, sizes[own]);
        } else {
          count_packed(c);
          pack_local(sendbuf, sendcount, sendtype, reinterpret_cast<std::byte*>(mine), sizes[own]);
        }
        if (a == algorithm_id::in_segment) { // blocks of one size (the choice above)
          const std::size_t block = sizes[own];
          bool in_rank_order = true;
          for (std::size_t q = 0; q < at.size(); ++q) in_rank_order &= at[q] == q * block;
          // (packed blocks lie in rank order in scratch already)
          byte* gathered = in_rank_order ? out : reinterpret_cast<byte*>(s.scratch_bytes(bytes));
          on_transport_as<collective::allgather>(c, s, a, [&](auto& t, const auto& algo) {
            tcoll::allgather(t, in, gathered, block, algo);
          });
          if (gathered != out)
            for (std::size_t q = 0; q < at.size(); ++q)
              std::memcpy(out + at[q], gathered + q * block, block);
        } else {
          on_transport(c, s, a, [&](auto& t) {
            tcoll::allgatherv(t, in, sizes[own], out, std::span<const std::size_t>(sizes),
                              std::span<const std::size_t>(at));
          });
        }
        if (rsize == 0)
          for (int q = 0; q < P; ++q)
            unpack_local(reinterpret_cast<const std::byte*>(out) + at[static_cast<std::size_t>(q)],
                         sizes[static_cast<std::size_t>(q)], block_at(q), recvcounts[q], recvtype);
      });
}

/// MPI_Allgatherv and MPI_Allgatherv_c: blocks of one size laid out in rank order
/// (displs[q] = q x recvcounts[0]) run as MPI_Allgather, any other layout as tcoll's
/// allgatherv. Ranks whose own displacements (not an argument they share) pick different
/// forms still match: blocks of one size choose as MPI_Allgather in both, and both run the
/// collective area, or the ring on the same blocks in the same order.
template <class Count, class Displ, class Pmpi>
int allgatherv_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                    const Count recvcounts[], const Displ displs[], MPI_Datatype recvtype,
                    MPI_Comm comm, Pmpi pmpi) {
  constexpr coll c = coll::allgatherv;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  if (falls_back_before_counts(c, comm,
                               recvcounts != nullptr && displs != nullptr && recvbuf && sendbuf &&
                                   (in_place || sendcount >= 0)))
    return pmpi();
  const int P = comm_size(comm);
  const long long block = common_count(recvcounts, P);
  if (block == 0 && empty_call_to_mpi(c, comm)) return pmpi(); // as MPI_Allgather's
  bool in_order = block >= 0;
  for (int q = 0; in_order && q < P; ++q) in_order = static_cast<long long>(displs[q]) == q * block;
  if (!in_order)
    return allgatherv_blocks_call(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                                  recvtype, comm, pmpi);
  return blocks_call<collective::allgather>(sendbuf, sendcount, sendtype, recvbuf,
                                            static_cast<Count>(block), recvtype, comm, pmpi, c);
}

} // namespace

/// MPI_Reduce_scatter through tcoll's ring where every block has the same size.
TCOLL_PRELOAD_EXPORT int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf,
                                            const int recvcounts[], MPI_Datatype datatype,
                                            MPI_Op op, MPI_Comm comm) {
  return reduce_scatter_call(sendbuf, recvbuf, recvcounts, datatype, op, comm, [&] {
    return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
  });
}

/// MPI_Allgatherv through tcoll's ring where the blocks have one size and follow each other
/// in rank order.
TCOLL_PRELOAD_EXPORT int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                        void* recvbuf, const int recvcounts[], const int displs[],
                                        MPI_Datatype recvtype, MPI_Comm comm) {
  return allgatherv_call(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm,
                         [&] {
                           return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                                                  displs, recvtype, comm);
                         });
}

#if TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's MPI_Reduce_scatter_c: the same path as MPI_Reduce_scatter.
TCOLL_PRELOAD_EXPORT int MPI_Reduce_scatter_c(const void* sendbuf, void* recvbuf,
                                              const MPI_Count recvcounts[], MPI_Datatype datatype,
                                              MPI_Op op, MPI_Comm comm) {
  return reduce_scatter_call(sendbuf, recvbuf, recvcounts, datatype, op, comm, [&] {
    return PMPI_Reduce_scatter_c(sendbuf, recvbuf, recvcounts, datatype, op, comm);
  });
}

/// MPI-4's MPI_Allgatherv_c: the same path as MPI_Allgatherv.
TCOLL_PRELOAD_EXPORT int MPI_Allgatherv_c(const void* sendbuf, MPI_Count sendcount,
                                          MPI_Datatype sendtype, void* recvbuf,
                                          const MPI_Count recvcounts[], const MPI_Aint displs[],
                                          MPI_Datatype recvtype, MPI_Comm comm) {
  return allgatherv_call(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm,
                         [&] {
                           return PMPI_Allgatherv_c(sendbuf, sendcount, sendtype, recvbuf,
                                                    recvcounts, displs, recvtype, comm);
                         });
}
#endif

/// MPI_Alltoall through tcoll's all-to-all (pairwise exchange, Bruck's for short blocks on
/// many ranks) over shared memory where the ranks share one node, MPI's own elsewhere.
TCOLL_PRELOAD_EXPORT int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                      void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                      MPI_Comm comm) {
  if (recvcount == 0 && empty_call_to_mpi(coll::alltoall, comm))
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return blocks_call<collective::alltoall>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, [&] {
        return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
      });
}

#if TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's MPI_Alltoall_c: the same path as MPI_Alltoall.
TCOLL_PRELOAD_EXPORT int MPI_Alltoall_c(const void* sendbuf, MPI_Count sendcount,
                                        MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,
                                        MPI_Datatype recvtype, MPI_Comm comm) {
  if (recvcount == 0 && empty_call_to_mpi(coll::alltoall, comm))
    return PMPI_Alltoall_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return blocks_call<collective::alltoall>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, [&] {
        return PMPI_Alltoall_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
      });
}
#endif

namespace {

/// MPI_Gather and MPI_Gather_c (`Count` int or MPI_Count); `pmpi()` hands the call to MPI.
/// The path is chosen from the root and the block's signature bytes (sendcount x the size of
/// sendtype; at a root in place recvcount x the size of recvtype), which MPI requires every
/// rank to share with the root's recvcount x recvtype. recvbuf, recvcount and recvtype are
/// read at the root only. Blocks move as bytes; a rank whose datatype is derived or not
/// contiguous packs its block (or, at the root, unpacks the gathered ones) locally around
/// the collective, as MPI_Allgather's do.
template <class Count, class Pmpi>
int gather_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, Pmpi pmpi) {
  constexpr coll c = coll::gather;
  rooted_call m;
  return intercept<Count>(
      c, comm, pmpi,
      [&]() -> measured_call {
        // in place at the root only (MPI judges it elsewhere)
        m = measure_rooted_call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                sendbuf == MPI_IN_PLACE, root, comm, true);
        if (m.why) return to_mpi(*m.why);
        return {.bytes = m.bytes, .repeatable = m.rank_direct() && m.root_direct()};
      },
      node_choice_of(c, comm, m.P),
      [&](algorithm_id a, std::size_t bytes) {
        comm_state& s = state_of(comm);
        if (!m.rank_direct() || !m.root_direct()) count_packed(c);
        auto* root_out = !m.is_root ? nullptr
                         : m.root_direct()
                             ? static_cast<unsigned char*>(recvbuf)
                             : reinterpret_cast<unsigned char*>(s.scratch_bytes(bytes));
        const rooted_bytes b =
            gather_bytes(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, m, root,
                         root_out, [&](std::size_t n) { return s.scratch_bytes(n); });
        on_transport(c, s, a, [&](auto& t) { tcoll::gather(t, b.in, b.out, m.block, root); });
        if (!m.root_direct())
          unpack_blocks(reinterpret_cast<const std::byte*>(b.out), m.P, m.block, recvbuf, recvcount,
                        recvtype);
      },
      send_recv_key(comm, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root));
}

/// MPI_Scatter and MPI_Scatter_c (`Count` int or MPI_Count); `pmpi()` hands the call to MPI.
/// The path is chosen from the root and the block's signature bytes (recvcount x the size of
/// recvtype; at a root in place sendcount x the size of sendtype), which every rank shares;
/// sendbuf, sendcount and sendtype are read at the root only. Blocks move as bytes, packed
/// and unpacked locally where a datatype is derived or not contiguous.
template <class Count, class Pmpi>
int scatter_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                 Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, Pmpi pmpi) {
  constexpr coll c = coll::scatter;
  rooted_call m;
  return intercept<Count>(
      c, comm, pmpi,
      [&]() -> measured_call {
        // in place at the root only (MPI judges it elsewhere)
        m = measure_rooted_call(recvbuf, recvcount, recvtype, sendbuf, sendcount, sendtype,
                                recvbuf == MPI_IN_PLACE, root, comm, true);
        if (m.why) return to_mpi(*m.why);
        return {.bytes = m.bytes, .repeatable = m.rank_direct() && m.root_direct()};
      },
      node_choice_of(c, comm, m.P),
      [&](algorithm_id a, std::size_t) {
        comm_state& s = state_of(comm);
        if (!m.rank_direct() || !m.root_direct()) count_packed(c);
        const rooted_bytes b = scatter_bytes(sendbuf, sendcount, sendtype, recvbuf, m, root,
                                             [&](std::size_t n) { return s.scratch_bytes(n); });
        on_transport(c, s, a, [&](auto& t) { tcoll::scatter(t, b.in, b.out, m.block, root); });
        if (!m.rank_direct())
          unpack_local(reinterpret_cast<const std::byte*>(b.out), m.block, recvbuf, recvcount,
                       recvtype);
      },
      send_recv_key(comm, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root));
}

} // namespace

/// MPI_Gather through tcoll's linear gather (over shared memory where the ranks share one
/// node), moved as bytes; MPI's own elsewhere.
TCOLL_PRELOAD_EXPORT int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                    void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                                    MPI_Comm comm) {
  return gather_call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, [&] {
    return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}

/// MPI_Scatter through tcoll's linear scatter (over shared memory where the ranks share one
/// node), moved as bytes; MPI's own elsewhere.
TCOLL_PRELOAD_EXPORT int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                     void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                                     MPI_Comm comm) {
  return scatter_call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, [&] {
    return PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}

#if TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's MPI_Gather_c: the same path as MPI_Gather.
TCOLL_PRELOAD_EXPORT int MPI_Gather_c(const void* sendbuf, MPI_Count sendcount,
                                      MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,
                                      MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return gather_call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, [&] {
    return PMPI_Gather_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}

/// MPI-4's MPI_Scatter_c: the same path as MPI_Scatter.
TCOLL_PRELOAD_EXPORT int MPI_Scatter_c(const void* sendbuf, MPI_Count sendcount,
                                       MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,
                                       MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return scatter_call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, [&] {
    return PMPI_Scatter_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  });
}
#endif

namespace {

/// MPI_Alltoallv and MPI_Alltoallv_c (`Count` int or MPI_Count, `Displ` int or MPI_Aint);
/// `pmpi()` hands the call to MPI. Each rank knows only its own blocks, so the route is
/// chosen without a size (`per_rank_size`): a TCOLL_ALLTOALLV_ALGO rule (0-max), else the
/// built-in choice, which depends on whether the ranks share one node only. A rank whose
/// counts are all zero still takes part. Blocks move as bytes (each block's signature); a
/// derived or non-contiguous datatype is packed and unpacked locally. In place (sendbuf
/// MPI_IN_PLACE) the send side is the receive side: sendcounts, sdispls and sendtype are not
/// read.
template <class Count, class Displ, class Pmpi>
int alltoallv_call(const void* sendbuf, const Count sendcounts[], const Displ sdispls[],
                   MPI_Datatype sendtype, void* recvbuf, const Count recvcounts[],
                   const Displ rdispls[], MPI_Datatype recvtype, MPI_Comm comm, Pmpi pmpi) {
  constexpr coll c = coll::alltoallv;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  int P = 0, rank = 0;
  v_side send, recv;
  return intercept<Count>(
      c, comm, pmpi,
      [&]() -> measured_call {
        if (auto why = communicator_fallback(comm, true)) return to_mpi(*why);
        P = comm_size(comm);
        rank = comm_rank(comm);
        if (!measure_side(recv, recvbuf, recvcounts, rdispls, recvtype, P))
          return to_mpi(fallback::arguments); // MPI reports the bad count or type
        if (in_place) return per_rank_part(recv.total);
        if (!measure_side(send, sendbuf, sendcounts, sdispls, sendtype, P) ||
            send.sizes[static_cast<std::size_t>(rank)] !=
                recv.sizes[static_cast<std::size_t>(rank)])
          return to_mpi(fallback::arguments); // ... or the mismatch of the block to itself
        return per_rank_part(send.total);
      },
      node_choice_of(c, comm, P),
      [&](algorithm_id a, std::size_t) {
        comm_state& s = state_of(comm);
        if (!recv.direct || (!in_place && !send.direct)) count_packed(c);
        // in place, the blocks to send sit in recvbuf as the receive side describes them
        pack_side(recv, recvbuf, recvcounts, rdispls, recvtype, P, in_place);
        if (!in_place) pack_side(send, sendbuf, sendcounts, sdispls, sendtype, P, true);
        const v_side& from = in_place ? recv : send;
        on_transport(c, s, a, [&](auto& t) {
          tcoll::alltoallv(t, static_cast<const unsigned char*>(from.data), sizes_of(from),
                           places_of(from), recv.data, sizes_of(recv), places_of(recv));
        });
        unpack_side(recv, recvbuf, recvcounts, rdispls, recvtype, P);
      },
      route_key(comm));
}

/// MPI_Gatherv and MPI_Gatherv_c; `pmpi()` hands the call to MPI. The route is chosen from
/// the root and the settings only (`per_rank_size`: only the root knows every count); a rank
/// with an empty block still takes part. recvbuf, recvcounts, displs and recvtype are read at
/// the root only; in place at the root (sendbuf MPI_IN_PLACE) its block is already at its
/// place in recvbuf, and sendcount and sendtype are not read. Blocks move as bytes, packed
/// and unpacked locally where a datatype is derived or not contiguous.
template <class Count, class Displ, class Pmpi>
int gatherv_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                 const Count recvcounts[], const Displ displs[], MPI_Datatype recvtype, int root,
                 MPI_Comm comm, Pmpi pmpi) {
  constexpr coll c = coll::gatherv;
  const bool in_place = sendbuf == MPI_IN_PLACE; // at the root only (MPI judges it elsewhere)
  rooted_v_call m;
  v_side recv; // the root's
  return intercept<Count>(
      c, comm, pmpi,
      [&]() -> measured_call {
        m = measure_rooted_v_call(sendcount, sendtype, recv, recvbuf, recvcounts, displs, recvtype,
                                  in_place, root, comm, true);
        if (m.why) return to_mpi(*m.why);
        return per_rank_part(m.bytes);
      },
      node_choice_of(c, comm, m.P),
      [&](algorithm_id a, std::size_t) {
        comm_state& s = state_of(comm);
        using byte = unsigned char;
        const int P = m.P;
        const bool is_root = m.is_root;
        const std::size_t block = m.block;
        if (!m.rank_direct(sendbuf) || (is_root && !recv.direct)) count_packed(c);
        std::vector<std::byte> send_packed;
        const byte* in = gatherv_input(sendbuf, sendcount, sendtype, recv, recvbuf, recvcounts,
                                       displs, recvtype, m, root, send_packed);
        on_transport(c, s, a, [&](auto& t) {
          if (is_root)
            tcoll::gatherv(t, in, block, recv.data, sizes_of(recv), places_of(recv), root);
          else
            tcoll::gatherv(t, in, block, static_cast<byte*>(nullptr), {}, {}, root);
        });
        if (is_root)
          unpack_side(recv, recvbuf, recvcounts, displs, recvtype, P, in_place ? root : -1);
      },
      route_key(comm, root));
}

/// MPI_Scatterv and MPI_Scatterv_c; `pmpi()` hands the call to MPI. As MPI_Gatherv: the route
/// from the root and the settings only; sendbuf, sendcounts, displs and sendtype are read at
/// the root only; in place at the root (recvbuf MPI_IN_PLACE) its block stays where it is,
/// and recvcount and recvtype are not read.
template <class Count, class Displ, class Pmpi>
int scatterv_call(const void* sendbuf, const Count sendcounts[], const Displ displs[],
                  MPI_Datatype sendtype, void* recvbuf, Count recvcount, MPI_Datatype recvtype,
                  int root, MPI_Comm comm, Pmpi pmpi) {
  constexpr coll c = coll::scatterv;
  const bool in_place = recvbuf == MPI_IN_PLACE; // at the root only (MPI judges it elsewhere)
  rooted_v_call m;
  v_side send; // the root's
  return intercept<Count>(
      c, comm, pmpi,
      [&]() -> measured_call {
        m = measure_rooted_v_call(recvcount, recvtype, send, sendbuf, sendcounts, displs, sendtype,
                                  in_place, root, comm, true);
        if (m.why) return to_mpi(*m.why);
        return per_rank_part(m.bytes);
      },
      node_choice_of(c, comm, m.P),
      [&](algorithm_id a, std::size_t) {
        comm_state& s = state_of(comm);
        using byte = unsigned char;
        const bool is_root = m.is_root;
        const std::size_t block = m.block;
        const bool recv_direct = m.rank_direct(recvbuf);
        if (!recv_direct || (is_root && !send.direct)) count_packed(c);
        std::vector<std::byte> recv_packed;
        byte* out = scatterv_output(sendbuf, sendcounts, displs, sendtype, send, recvbuf, m, root,
                                    recv_packed);
        on_transport(c, s, a, [&](auto& t) {
          if (is_root)
            tcoll::scatterv(t, static_cast<const byte*>(send.data), sizes_of(send), places_of(send),
                            out, block, root);
          else
            tcoll::scatterv(t, static_cast<const byte*>(nullptr), {}, {}, out, block, root);
        });
        if (!recv_direct) unpack_local(recv_packed.data(), block, recvbuf, recvcount, recvtype);
      },
      route_key(comm, root));
}

} // namespace

/// MPI_Alltoallv through tcoll's pairwise exchange (over shared memory where the ranks share
/// one node) where a TCOLL_ALLTOALLV_ALGO rule or the built-in choice says so; MPI's own
/// elsewhere.
TCOLL_PRELOAD_EXPORT int MPI_Alltoallv(const void* sendbuf, const int sendcounts[],
                                       const int sdispls[], MPI_Datatype sendtype, void* recvbuf,
                                       const int recvcounts[], const int rdispls[],
                                       MPI_Datatype recvtype, MPI_Comm comm) {
  return alltoallv_call(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                        recvtype, comm, [&] {
                          return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf,
                                                recvcounts, rdispls, recvtype, comm);
                        });
}

/// MPI_Gatherv through tcoll's linear gather where a TCOLL_GATHERV_ALGO rule or the built-in
/// choice says so; MPI's own elsewhere.
TCOLL_PRELOAD_EXPORT int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                     void* recvbuf, const int recvcounts[], const int displs[],
                                     MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return gatherv_call(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root,
                      comm, [&] {
                        return PMPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                                            displs, recvtype, root, comm);
                      });
}

/// MPI_Scatterv through tcoll's linear scatter where a TCOLL_SCATTERV_ALGO rule or the
/// built-in choice says so; MPI's own elsewhere.
TCOLL_PRELOAD_EXPORT int MPI_Scatterv(const void* sendbuf, const int sendcounts[],
                                      const int displs[], MPI_Datatype sendtype, void* recvbuf,
                                      int recvcount, MPI_Datatype recvtype, int root,
                                      MPI_Comm comm) {
  return scatterv_call(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root,
                       comm, [&] {
                         return PMPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf,
                                              recvcount, recvtype, root, comm);
                       });
}

#if TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's MPI_Alltoallv_c: the same path as MPI_Alltoallv.
TCOLL_PRELOAD_EXPORT int MPI_Alltoallv_c(const void* sendbuf, const MPI_Count sendcounts[],
                                         const MPI_Aint sdispls[], MPI_Datatype sendtype,
                                         void* recvbuf, const MPI_Count recvcounts[],
                                         const MPI_Aint rdispls[], MPI_Datatype recvtype,
                                         MPI_Comm comm) {
  return alltoallv_call(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                        recvtype, comm, [&] {
                          return PMPI_Alltoallv_c(sendbuf, sendcounts, sdispls, sendtype, recvbuf,
                                                  recvcounts, rdispls, recvtype, comm);
                        });
}

/// MPI-4's MPI_Gatherv_c: the same path as MPI_Gatherv.
TCOLL_PRELOAD_EXPORT int MPI_Gatherv_c(const void* sendbuf, MPI_Count sendcount,
                                       MPI_Datatype sendtype, void* recvbuf,
                                       const MPI_Count recvcounts[], const MPI_Aint displs[],
                                       MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return gatherv_call(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root,
                      comm, [&] {
                        return PMPI_Gatherv_c(sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                                              displs, recvtype, root, comm);
                      });
}

/// MPI-4's MPI_Scatterv_c: the same path as MPI_Scatterv.
TCOLL_PRELOAD_EXPORT int MPI_Scatterv_c(const void* sendbuf, const MPI_Count sendcounts[],
                                        const MPI_Aint displs[], MPI_Datatype sendtype,
                                        void* recvbuf, MPI_Count recvcount, MPI_Datatype recvtype,
                                        int root, MPI_Comm comm) {
  return scatterv_call(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root,
                       comm, [&] {
                         return PMPI_Scatterv_c(sendbuf, sendcounts, displs, sendtype, recvbuf,
                                                recvcount, recvtype, root, comm);
                       });
}
#endif

namespace {

/// MPI_Bcast and MPI_Bcast_c (`Count` int or MPI_Count); `pmpi()` hands the call to MPI.
template <class Count, class Pmpi>
int bcast_call(void* buffer, Count count, MPI_Datatype datatype, int root, MPI_Comm comm,
               Pmpi pmpi) {
  constexpr coll c = coll::bcast;
  int P = 0;
  std::size_t size = 0; // of an element; 0: derived or not contiguous
  return intercept<Count>(
      c, comm, pmpi,
      [&]() -> measured_call {
        if (auto why = communicator_fallback(comm, count_fits(count) && buffer != nullptr))
          return to_mpi(*why);
        P = comm_size(comm);
        size = contiguous_size(datatype);
        const long long signature =
            size ? static_cast<long long>(size) * count : signature_bytes(count, datatype);
        if (root < 0 || root >= P || signature < 0) return to_mpi(fallback::arguments);
        return {.bytes = static_cast<std::size_t>(signature), .repeatable = size != 0};
      },
      node_choice_of(c, comm, P),
      [&](algorithm_id a, std::size_t bytes) {
        comm_state& s = state_of(comm);
        const bool direct = size != 0;
        unsigned char* data = static_cast<unsigned char*>(buffer);
        if (!direct) {
          count_packed(c);
          data = reinterpret_cast<unsigned char*>(s.scratch_bytes(bytes));
          if (s.rank == root)
            pack_local(buffer, count, datatype, reinterpret_cast<std::byte*>(data), bytes);
        }
        on_transport_as<collective::broadcast>(c, s, a, [&](auto& t, const auto& algo) {
          tcoll::broadcast(t, data, bytes, root, algo);
        });
        if (!direct && s.rank != root)
          unpack_local(reinterpret_cast<const std::byte*>(data), bytes, buffer, count, datatype);
      },
      {comm,
       {count, 0},
       {datatype, MPI_DATATYPE_NULL},
       MPI_OP_NULL,
       root,
       buffer_flags(buffer, buffer)});
}

} // namespace

/// MPI_Bcast through tcoll's binomial tree, moved as bytes. The path is chosen from the
/// signature bytes (count x the size of the datatype), which every rank of a matching call
/// shares even where the root sends one derived type and the others receive another; a rank
/// whose datatype is derived or not contiguous packs (root) or unpacks (others) locally.
TCOLL_PRELOAD_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root,
                                   MPI_Comm comm) {
  if (count == 0 && empty_call_to_mpi(coll::bcast, comm))
    return PMPI_Bcast(buffer, count, datatype, root, comm);
  return bcast_call(buffer, count, datatype, root, comm,
                    [&] { return PMPI_Bcast(buffer, count, datatype, root, comm); });
}

#if TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's MPI_Bcast_c: the same path as MPI_Bcast.
TCOLL_PRELOAD_EXPORT int MPI_Bcast_c(void* buffer, MPI_Count count, MPI_Datatype datatype, int root,
                                     MPI_Comm comm) {
  if (count == 0 && empty_call_to_mpi(coll::bcast, comm))
    return PMPI_Bcast_c(buffer, count, datatype, root, comm);
  return bcast_call(buffer, count, datatype, root, comm,
                    [&] { return PMPI_Bcast_c(buffer, count, datatype, root, comm); });
}
#endif

namespace {

/// MPI_Reduce and MPI_Reduce_c (`Count` int or MPI_Count); `pmpi()` hands the call to MPI.
template <class Count, class Pmpi>
int reduce_call(const void* sendbuf, void* recvbuf, Count count, MPI_Datatype datatype, MPI_Op op,
                int root, MPI_Comm comm, Pmpi pmpi) {
  constexpr coll c = coll::reduce;
  int P = 0;
  bool is_root = false;
  reduction r;
  return intercept<Count>(
      c, comm, pmpi,
      [&]() -> measured_call {
        if (auto why = communicator_fallback(comm, count_fits(count) && sendbuf != nullptr))
          return to_mpi(*why);
        P = comm_size(comm);
        is_root = comm_rank(comm) == root;
        if (root < 0 || root >= P || (is_root && recvbuf == nullptr) ||
            (!is_root && sendbuf == MPI_IN_PLACE))
          return to_mpi(fallback::arguments);
        r = classify_reduction(datatype, op);
        if (!r.ok()) return to_mpi(r.why);
        return {.bytes = static_cast<std::size_t>(count) * r.size, .repeatable = true};
      },
      node_choice_of(c, comm, P),
      [&](algorithm_id a, std::size_t) {
        comm_state& s = state_of(comm);
        on_transport_as<collective::reduce>(c, s, a, [&](auto& t, const auto& algo) {
          dispatch(r, [&]<class T>(const auto& o) {
            T* out = is_root ? static_cast<T*>(recvbuf) : nullptr;
            const T* in = sendbuf == MPI_IN_PLACE ? out : static_cast<const T*>(sendbuf);
            tcoll::reduce(t, in, out, static_cast<std::size_t>(count), root, o, algo);
          });
        });
      },
      {comm, {count, 0}, {datatype, MPI_DATATYPE_NULL}, op, root, buffer_flags(sendbuf, recvbuf)});
}

} // namespace

/// MPI_Reduce through tcoll's binomial tree (reduction types and ops as MPI_Allreduce).
TCOLL_PRELOAD_EXPORT int MPI_Reduce(const void* sendbuf, void* recvbuf, int count,
                                    MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
  if (count == 0 && empty_call_to_mpi(coll::reduce, comm))
    return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
  return reduce_call(sendbuf, recvbuf, count, datatype, op, root, comm, [&] {
    return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
  });
}

#if TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's MPI_Reduce_c: the same path as MPI_Reduce.
TCOLL_PRELOAD_EXPORT int MPI_Reduce_c(const void* sendbuf, void* recvbuf, MPI_Count count,
                                      MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
  if (count == 0 && empty_call_to_mpi(coll::reduce, comm))
    return PMPI_Reduce_c(sendbuf, recvbuf, count, datatype, op, root, comm);
  return reduce_call(sendbuf, recvbuf, count, datatype, op, root, comm, [&] {
    return PMPI_Reduce_c(sendbuf, recvbuf, count, datatype, op, root, comm);
  });
}
#endif

/// MPI_Barrier: where a TCOLL_BARRIER_ALGO rule (0-max) says, its algorithm; else on a
/// communicator whose ranks share one node, tcoll's in-segment barrier (one flag per rank in
/// the shared segment's collective area; `settings::shm_barrier`); MPI's own elsewhere. Like every
/// blocking wrapper it first creates the tcoll state that an earlier MPI_Iallreduce on the
/// communicator found missing, so a program that synchronises with barriers only still gets tcoll's
/// MPI_Iallreduce after the first.
TCOLL_PRELOAD_EXPORT int MPI_Barrier(MPI_Comm comm) {
  constexpr coll c = coll::barrier;
  int P = 0;
  auto pmpi = [&] { return PMPI_Barrier(comm); };
  return intercept<int>(
      c, comm, pmpi,
      [&]() -> measured_call {
        if (auto why = communicator_fallback(comm, true)) return to_mpi(*why);
        P = comm_size(comm);
        return no_data();
      },
      node_choice_of(c, comm, P),
      [&](algorithm_id a, std::size_t) {
        on_transport_as<collective::barrier>(
            c, state_of(comm), a, [&](auto& t, const auto& algo) { tcoll::barrier(t, algo); });
      });
}
