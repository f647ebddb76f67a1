#pragma once
/// \file
/// The one prologue of the preload's blocking wrappers (MPI_Allreduce, MPI_Reduce_scatter(
/// _block), MPI_Allgather(v), MPI_Bcast, MPI_Reduce, MPI_Alltoall(v), MPI_Gather(v),
/// MPI_Scatter(v), their `_c` forms, and MPI_Barrier): every wrapper states what differs (how it
/// measures its call, which one-node choice it consults, how it runs on a communicator) and
/// `intercept` runs the steps they share, in one order.
#include "tcoll_mpi.hpp"

#include <cstddef>
#include <exception>
#include <optional>

namespace tcoll::preload {

/// What a wrapper's checks found: the bytes its call moves (the size its selection rules
/// measure, docs/preload.md; 0: an empty call), or in `why` the reason MPI runs it.
/// `per_rank`: `bytes` is this rank's own part of a call whose ranks move sizes of their own
/// (MPI_Alltoallv, MPI_Gatherv, MPI_Scatterv; `per_rank_size`). The route is then chosen
/// without it, and a rank whose part is empty still takes part in the collective (another
/// rank's is not). `bytes` is only reported (TCOLL_DEBUG).
struct measured_call {
  std::size_t bytes = 0;
  std::optional<fallback> why = std::nullopt;
  bool per_rank = false;
  /// Its datatypes and op are predefined: the route of the same call again is the same.
  bool repeatable = false;
};

/// A call that MPI runs, for `why`.
inline measured_call to_mpi(fallback why) {
  return {0, why};
}

/// A call of a collective that moves no data (MPI_Barrier): never an empty call, and routed
/// without a size.
inline measured_call no_data() {
  return {0, std::nullopt, true};
}

/// A call of a per-rank-size collective of which this rank moves `bytes` (maybe none). Its
/// route depends on the communicator and the settings only, so any call again on the
/// communicator takes the same one (`repeatable`).
inline measured_call per_rank_part(std::size_t bytes) {
  return {bytes, std::nullopt, true, true};
}

/// What a wrapper's route depends on, read from its arguments before any check: the
/// communicator, counts and datatypes (two for a call with a send and a receive side), op,
/// root, and `flags` for what else its checks look at (null or in-place buffers). No key
/// (`comm` null): the wrapper's calls are not remembered.
struct call_key {
  MPI_Comm comm = MPI_COMM_NULL;
  long long counts[2] = {0, 0};
  MPI_Datatype types[2] = {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL};
  MPI_Op op = MPI_OP_NULL;
  int root = 0;
  unsigned flags = 0;
  [[gnu::always_inline]] bool operator==(const call_key&) const = default;
};

/// The buffer facts a wrapper's checks look at, for `call_key::flags`.
inline unsigned buffer_flags(const void* send, const void* recv) {
  return (send == nullptr) | (send == MPI_IN_PLACE) << 1 | (recv == nullptr) << 2 |
         (recv == MPI_IN_PLACE) << 3;
}

/// The key of a call with a send and a receive side (allgather, alltoall, gather, scatter).
template <class Count>
call_key send_recv_key(MPI_Comm comm, const void* sendbuf, Count sendcount, MPI_Datatype sendtype,
                       const void* recvbuf, Count recvcount, MPI_Datatype recvtype, int root = 0) {
  return {comm, {sendcount, recvcount},        {sendtype, recvtype}, MPI_OP_NULL,
          root, buffer_flags(sendbuf, recvbuf)};
}

/// The key of a call whose route no size decides (`per_rank_size`): its communicator and root.
inline call_key route_key(MPI_Comm comm, int root = 0) {
  return {comm, {0, 0}, {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL}, MPI_OP_NULL, root, 0};
}

/// The last call of one collective on this thread that MPI ran by route (passthrough), with
/// the size it measured: the same call again (IMB's loop, a solver's per-step reduction)
/// goes to MPI without its checks and route, which cost 15-25 ns a call. Remembered only
/// where the measure found predefined datatypes and ops (`measured_call::repeatable`), whose
/// handles never change meaning, and only in the communicators' `comm_generation`. The
/// wrappers whose sizes are one count per rank give a key (allreduce, reduce, bcast,
/// allgather, alltoall, gather, scatter, reduce_scatter_block), and so do those whose route
/// no size decides (`per_rank_size`: alltoallv, gatherv, scatterv), with their communicator
/// and root only: any call of theirs again goes the same way. Those calls' sizes differ, so
/// with TCOLL_DEBUG set (which counts calls by size) they are not remembered.
/// MPI_Allgatherv and MPI_Reduce_scatter, routed by their total size, have no key.
struct passthrough_memo {
  call_key key;
  unsigned long long generation = 0;
  std::size_t bytes = 0;
};
inline thread_local passthrough_memo passthrough_memos[coll_count];

/// The communicator and pointer checks of a collective: a null communicator or arguments
/// that are not `args_ok` (MPI judges them), an intercommunicator. Nothing where tcoll may
/// run the call.
inline std::optional<fallback> communicator_fallback(MPI_Comm comm, bool args_ok) {
  if (comm == MPI_COMM_NULL || !args_ok) return fallback::arguments;
  if (is_intercomm(comm)) return fallback::intercomm;
  return std::nullopt;
}

/// The fast path of an empty call (a count of 0) of a collective whose count every rank
/// shares (MPI_Allreduce, MPI_Reduce, MPI_Bcast; MPI_Allgather and MPI_Alltoall by their
/// receive count, which every rank's blocks match), taken by the exported wrapper before it
/// builds anything: where MPI is up, no set-up is pending and the settings are valid, the
/// call is counted as empty and true says "hand it to MPI now" (step 6 of `intercept`
/// without steps 2-5, which have nothing to do then). Anything else: false, and `intercept`
/// takes the call. An empty call costs the wrapper 4-6 ns this way (Open MPI 4.1's own takes
/// 3.6-5 ns).
[[gnu::always_inline]] inline bool empty_call_to_mpi(coll c, MPI_Comm comm) {
  const settings* s = loaded_settings.load(std::memory_order_acquire);
  if (mpi_state.load(std::memory_order_acquire) != 1 ||
      pending_setups.load(std::memory_order_relaxed) != 0 || s == nullptr || !s->error.empty())
    return false;
  count_empty_call(c, comm);
  return true;
}

/// The steps every blocking wrapper of collective `c` takes, in this order:
/// 1. before MPI_Init or after MPI_Finalize, MPI runs the call;
/// 2. the tcoll state an earlier non-blocking start found missing is created
///    (`settle_pending_setup`: a collective step, as the call itself);
/// 3. a call equal to the last one MPI ran by route (`passthrough_memo`, where the wrapper
///    gives a `key`) goes to MPI, counted as that one was: the checks and the route below
///    are skipped (a memo exists only where the environment is valid);
/// 4. `measure()` checks the arguments, datatype and op and sizes the call; a fallback
///    reason hands it to MPI;
/// 5. an invalid environment is reported as MPI's error (MPI_ERR_ARG);
/// 6. an empty call goes to MPI, which checks its arguments and returns (not a `per_rank`
///    one: there an empty part on this rank says nothing of the others', and the call is
///    collective);
/// 7. the route: the first rule's or the built-in choice, then `node_choice(bytes, ruled)`
///    where the ranks may share one node (for a `per_rank` call neither looks at `bytes`),
///    and for the collective area what runs on this thread (`in_segment_here`);
///    the call is counted (TCOLL_DEBUG), and passthrough hands it to MPI (and is remembered,
///    where the measure found it `repeatable`);
/// 8. `run(a, bytes)` runs it; an exception becomes MPI's error (MPI_ERR_OTHER), printed
///    with the rank. `pmpi()` is the call's PMPI form; `Count` its count type.
template <class Count, class Pmpi, class Measure, class NodeChoice, class Run>
int intercept(coll c, MPI_Comm comm, Pmpi& pmpi, Measure&& measure, NodeChoice&& node_choice,
              Run&& run, const call_key& key = {}) {
  if (!mpi_active()) {
    count_fallback(c, fallback::not_initialized);
    return pmpi();
  }
  if (const int rc = settle_pending_setup(c, comm); rc != MPI_SUCCESS) return rc;
  passthrough_memo& memo = passthrough_memos[static_cast<int>(c)];
  const unsigned long long generation = comm_generation.load(std::memory_order_acquire);
  if (key.comm != MPI_COMM_NULL && memo.key == key && memo.generation == generation &&
      (!per_rank_size(c) || config().debug == 0)) {
    count_call(c, algorithm_id::passthrough, memo.bytes, comm);
    return pmpi();
  }
  const measured_call m = measure();
  if (m.why) {
    count_fallback(c, *m.why);
    return pmpi();
  }
  if (!config().error.empty()) return report_settings_error(c, comm);
  if (m.bytes == 0 && !m.per_rank) {
    count_empty_call(c, comm);
    return pmpi();
  }
  algorithm_id a = choose(c, m.bytes);
  try {
    a = node_choice(m.bytes, a);
    if (a == algorithm_id::in_segment) a = in_segment_here(c, comm);
  } catch (const std::exception& e) {
    return report_error(c, comm, MPI_ERR_OTHER, e.what());
  }
  count_call(c, a, m.bytes, comm);
  count_entry_point<Count>(c, a);
  if (a == algorithm_id::passthrough) {
    if (key.comm != MPI_COMM_NULL && m.repeatable && freeing_is_seen(comm))
      memo = {key, generation, m.bytes};
    return pmpi();
  }
  try {
    run(a, m.bytes);
  } catch (const std::exception& e) {
    return report_error(c, comm, MPI_ERR_OTHER, e.what());
  }
  return MPI_SUCCESS;
}

} // namespace tcoll::preload
