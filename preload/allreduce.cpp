/// \file
/// libtcoll_mpi.so: MPI_Allreduce and MPI_Iallreduce through tcoll.
#include "nonblocking.hpp"
#include "prologue.hpp"
#include "tcoll_mpi.hpp"

#include <cstring>
#include <exception>
#include <new>

#include <tcoll/schedule/nonblocking.hpp>

#undef MPI_Allreduce
#undef MPI_Iallreduce

namespace tcoll::preload {
namespace {

/// Calls f(algorithm struct) for the flat algorithm `a` through tcoll's one dispatch (the
/// predefined MPI ops tcoll runs are all commutative; passthrough is not a flat path).
template <class F>
void with_flat_algorithm(algorithm_id a, F&& f) {
  static const automatic knobs{.rules = {}}; // default ring and multi_ring knobs
  visit_algorithm<algorithm_support{.commutative = true, .native = false}>(a, knobs, f);
}

/// A flat algorithm `a` on transport `t`.
template <class Tr, class T, class Op>
void run_flat(Tr& t, algorithm_id a, const T* send, T* recv, std::size_t n, const Op& op) {
  with_flat_algorithm(
      a, [&](const auto& algorithm) { tcoll::allreduce(t, send, recv, n, op, algorithm); });
}

/// Runs an allreduce with algorithm `a` (not passthrough or empty) in `s`: over shared
/// memory where every rank of the communicator is on this node (TCOLL_SHM=1), else over MPI.
template <class T, class Op>
void run_allreduce(comm_state& s, algorithm_id a, const T* send, T* recv, std::size_t n,
                   const Op& op) {
  if (a == algorithm_id::hierarchical) {
    if (s.on_hierarchy([&](auto& machine) { tcoll::allreduce(machine, send, recv, n, op); }))
      count_shared_memory(coll::allreduce);
    return;
  }
  if (shm_transport* node = s.shared_memory()) {
    count_shared_memory(coll::allreduce);
    return run_flat(*node, a, send, recv, n, op);
  }
  return run_flat(s.transport(), a, send, recv, n, op);
}

/// `ruled` (the choice of the rules or the over-MPI default), or, where no rule covers
/// `bytes` and the communicator's ranks share one node, the built-in one-node choice.
/// Deciding that is collective on the first call (every rank makes the same call with the
/// same size, so every rank reaches it and gets the same answer). Below
/// shm_native_below_bytes both choices are MPI's own collective: no lookup there.
algorithm_id one_node_choice(coll c, MPI_Comm comm, std::size_t bytes, algorithm_id ruled) {
  if (bytes < config().shm_native_below_bytes || !config().shm || chosen_by_rule(c, bytes))
    return ruled;
  comm_state& s = state_of(comm);
  return s.shared_memory() ? choose_shared_memory(bytes, s.size) : ruled;
}

/// Queues the allreduce on the engine of communicator `c` (the communicator's shared-memory
/// or MPI transport, or its hierarchy with `MPI_Allreduce`'s default options, on the node
/// transport's engine); the engine thread completes the generalized request `r->handle`
/// when the data is in place (or failed). Message spaces are drawn when it is queued, so
/// calls queue in program order.
template <class Comm, class Run, class T, class Op, class Done>
void queue_iallreduce(Comm& c, Run run, const T* send, T* recv, std::size_t n, const Op& op,
                      Done done) {
  check_allreduce_arguments(send, recv, n, c.rank());
  queue_collective(
      c,
      [&c, run, send, recv, n, op](const auto& tags) {
        cpu_reducer red;
        run([&](const auto& algorithm) {
          allreduce_in(c, tags, send, recv, n, op, algorithm, red);
        });
      },
      done);
}

/// Queues an allreduce of `n` elements of reduction `r` with algorithm `a` (not passthrough
/// or empty) on the engine of `s`: over its two-level machine for `hierarchical`, else over
/// its shared-memory transport where it has one, else over MPI. `done(error)` completes it on
/// the engine thread. Throws where nothing was queued.
template <class Done>
void queue_allreduce(coll c, comm_state& s, algorithm_id a, const reduction& r, const void* sendbuf,
                     void* recvbuf, std::size_t n, Done done) {
  dispatch(r, [&]<class T>(const auto& o) {
    T* out = static_cast<T*>(recvbuf);
    const T* in = sendbuf == MPI_IN_PLACE ? out : static_cast<const T*>(sendbuf);
    auto flat = [a](const auto& f) { with_flat_algorithm(a, f); };
    if (a == algorithm_id::hierarchical) {
      auto defaults = [](const auto& f) { f(tcoll::hierarchical_options<tcoll::ring>{}); };
      if (s.on_hierarchy(
              [&](auto& machine) { queue_iallreduce(machine, defaults, in, out, n, o, done); }))
        count_shared_memory(c);
    } else if (tcoll::shm_transport* node = s.shared_memory()) {
      count_shared_memory(c);
      queue_iallreduce(*node, flat, in, out, n, o, done);
    } else {
      queue_iallreduce(s.transport(), flat, in, out, n, o, done);
    }
  });
}

/// What MPI_Iallreduce and MPI_Allreduce_init decided, locally: the path
/// (`decide_nonblocking`), the reduction and the count.
struct allreduce_start : local_start {
  reduction r;
  std::size_t n = 0;
};

/// The checks and the path of a non-blocking allreduce start of collective `c` (counted,
/// also where it goes to MPI); local: no communication (see `decide_nonblocking`).
template <class Count>
allreduce_start decide_local_start(coll c, const void* sendbuf, void* recvbuf, Count count,
                                   MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                   MPI_Request* request) {
  allreduce_start d;
  if (!mpi_active()) {
    count_fallback(c, fallback::not_initialized);
    d.to_mpi = true;
    return d;
  }
  d.r = classify_reduction(datatype, op);
  std::optional<fallback> why;
  const bool usable = d.r.ok() && !is_intercomm(comm) && count_fits(count) && recvbuf != nullptr &&
                      sendbuf != nullptr && comm != MPI_COMM_NULL && request != nullptr;
  if (!d.r.ok())
    why = d.r.why;
  else if (!usable)
    why = is_intercomm(comm) ? fallback::intercomm : fallback::arguments;
  d.n = usable ? static_cast<std::size_t>(count) : 0;
  const std::size_t bytes = d.n * d.r.size;
  static_cast<local_start&>(d) = decide_nonblocking(
      c, comm, why, bytes, bytes >= config().shm_native_below_bytes && config().shm,
      [bytes](const comm_state& s) { return choose_shared_memory(bytes, s.size); });
  return d;
}

} // namespace
} // namespace tcoll::preload

using namespace tcoll::preload;

namespace {

/// MPI_Allreduce and MPI_Allreduce_c (`Count` int or MPI_Count); `pmpi()` hands the call
/// to MPI.
template <class Count, class Pmpi>
int allreduce_call(const void* sendbuf, void* recvbuf, Count count, MPI_Datatype datatype,
                   MPI_Op op, MPI_Comm comm, Pmpi pmpi) {
  constexpr coll c = coll::allreduce;
  reduction r;
  return intercept<Count>(
      c, comm, pmpi,
      [&]() -> measured_call {
        r = classify_reduction(datatype, op);
        const bool usable = r.ok() && !is_intercomm(comm) && count_fits(count) &&
                            recvbuf != nullptr && sendbuf != nullptr && comm != MPI_COMM_NULL;
        if (!r.ok()) return to_mpi(r.why);
        if (!usable) return to_mpi(is_intercomm(comm) ? fallback::intercomm : fallback::arguments);
        return {.bytes = static_cast<std::size_t>(count) * r.size, .repeatable = true};
      },
      [&](std::size_t bytes, algorithm_id ruled) { return one_node_choice(c, comm, bytes, ruled); },
      [&](algorithm_id a, std::size_t) {
        comm_state& s = state_of(comm);
        dispatch(r, [&]<class T>(const auto& o) {
          T* out = static_cast<T*>(recvbuf);
          const T* in = sendbuf == MPI_IN_PLACE ? out : static_cast<const T*>(sendbuf);
          run_allreduce(s, a, in, out, static_cast<std::size_t>(count), o);
        });
      },
      {comm, {count, 0}, {datatype, MPI_DATATYPE_NULL}, op, 0, buffer_flags(sendbuf, recvbuf)});
}

} // namespace

/// MPI_Allreduce through tcoll for the predefined C integer and floating types and the
/// predefined ops tcoll runs (see docs/preload.md); PMPI_Allreduce otherwise.
TCOLL_PRELOAD_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  if (count == 0 && empty_call_to_mpi(coll::allreduce, comm))
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  return allreduce_call(sendbuf, recvbuf, count, datatype, op, comm, [&] {
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  });
}

#if TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's MPI_Allreduce_c (an MPI_Count count; mpi4py 4 calls it for every allreduce where
/// the MPI has it): the same path as MPI_Allreduce.
TCOLL_PRELOAD_EXPORT int MPI_Allreduce_c(const void* sendbuf, void* recvbuf, MPI_Count count,
                                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  if (count == 0 && empty_call_to_mpi(coll::allreduce, comm))
    return PMPI_Allreduce_c(sendbuf, recvbuf, count, datatype, op, comm);
  return allreduce_call(sendbuf, recvbuf, count, datatype, op, comm, [&] {
    return PMPI_Allreduce_c(sendbuf, recvbuf, count, datatype, op, comm);
  });
}
#endif

namespace {

/// MPI_Iallreduce and MPI_Iallreduce_c (`Count` int or MPI_Count); `pmpi()` hands the call
/// to MPI.
template <class Count, class Pmpi>
int iallreduce_call(const void* sendbuf, void* recvbuf, Count count, MPI_Datatype datatype,
                    MPI_Op op, MPI_Comm comm, MPI_Request* request, Pmpi pmpi) {
  constexpr coll c = coll::iallreduce;
  const allreduce_start d =
      decide_local_start(c, sendbuf, recvbuf, count, datatype, op, comm, request);
  if (d.error >= 0) return d.error;
  if (d.decided) {
    count_call(c, d.a, d.n * d.r.size, comm);
    count_entry_point<Count>(c, d.a);
  }
  if (d.to_mpi) return pmpi();
  return start_request(c, comm, request, [&](completion done) {
    queue_allreduce(c, *d.state, d.a, d.r, sendbuf, recvbuf, d.n, done);
  });
}

} // namespace

/// MPI_Iallreduce through tcoll's engine thread (a generalized request completed by it) when
/// MPI runs at MPI_THREAD_MULTIPLE; PMPI_Iallreduce otherwise, for passthrough sizes and for
/// and over the same machine as MPI_Allreduce for sizes a rule sends to `hierarchical` (on
/// the node transport's engine). On a communicator in shared memory (TCOLL_SHM=1) it runs
/// over the shared-memory transport, with the same built-in choice as MPI_Allreduce where
/// no rule covers the size.
TCOLL_PRELOAD_EXPORT int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count,
                                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                        MPI_Request* request) {
  return iallreduce_call(sendbuf, recvbuf, count, datatype, op, comm, request, [&] {
    return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  });
}

#if TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's MPI_Iallreduce_c: the same path as MPI_Iallreduce.
TCOLL_PRELOAD_EXPORT int MPI_Iallreduce_c(const void* sendbuf, void* recvbuf, MPI_Count count,
                                          MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                          MPI_Request* request) {
  return iallreduce_call(sendbuf, recvbuf, count, datatype, op, comm, request, [&] {
    return PMPI_Iallreduce_c(sendbuf, recvbuf, count, datatype, op, comm, request);
  });
}
#endif

#if TCOLL_PRELOAD_PERSISTENT
namespace {

/// MPI_Allreduce_init (MPIX_ on Open MPI 4) and MPI_Allreduce_init_c: decided once, locally,
/// like MPI_Iallreduce (a persistent start is a non-blocking one); where tcoll runs it,
/// every MPI_Start queues it on the communicator's engine (see `persistent_collective`).
/// `pmpi()` hands the call to MPI.
template <class Count, class Pmpi>
int allreduce_init_call(const void* sendbuf, void* recvbuf, Count count, MPI_Datatype datatype,
                        MPI_Op op, MPI_Comm comm, MPI_Request* request, Pmpi pmpi) {
  constexpr coll c = coll::allreduce_init;
  const allreduce_start d =
      decide_local_start(c, sendbuf, recvbuf, count, datatype, op, comm, request);
  if (d.error >= 0) return d.error;
  if (d.decided) count_entry_point<Count>(c, d.a);
  if (d.to_mpi) {
    if (d.decided) count_call(c, d.a, d.n * d.r.size, comm); // passthrough: counted once
    return pmpi();
  }
  return init_persistent(
      c, comm, d, d.n * d.r.size, request,
      [a = d.a, r = d.r, sendbuf, recvbuf, n = d.n, state = d.state](completion done) {
        queue_allreduce(c, *state, a, r, sendbuf, recvbuf, n, done);
      });
}

} // namespace
#endif

#if TCOLL_PRELOAD_PERSISTENT == 1
/// MPI-4's persistent allreduce through tcoll: every MPI_Start runs it on the engine of the
/// communicator, as MPI_Iallreduce does (same rules, same fallbacks, MPI_THREAD_MULTIPLE).
TCOLL_PRELOAD_EXPORT int MPI_Allreduce_init(const void* sendbuf, void* recvbuf, int count,
                                            MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                            MPI_Info info, MPI_Request* request) {
  return allreduce_init_call(sendbuf, recvbuf, count, datatype, op, comm, request, [&] {
    return PMPI_Allreduce_init(sendbuf, recvbuf, count, datatype, op, comm, info, request);
  });
}

#if TCOLL_PRELOAD_LARGE_COUNT // (Open MPI 5 has the persistent collectives, not these)
/// MPI-4's MPI_Allreduce_init_c: the same path as MPI_Allreduce_init.
TCOLL_PRELOAD_EXPORT int MPI_Allreduce_init_c(const void* sendbuf, void* recvbuf, MPI_Count count,
                                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                              MPI_Info info, MPI_Request* request) {
  return allreduce_init_call(sendbuf, recvbuf, count, datatype, op, comm, request, [&] {
    return PMPI_Allreduce_init_c(sendbuf, recvbuf, count, datatype, op, comm, info, request);
  });
}
#endif
#elif TCOLL_PRELOAD_PERSISTENT == 2
/// Open MPI 4's persistent allreduce (the `pcollreq` extension, `mpi-ext.h`) through tcoll,
/// as MPI_Allreduce_init on MPI-4.
TCOLL_PRELOAD_EXPORT int MPIX_Allreduce_init(const void* sendbuf, void* recvbuf, int count,
                                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                             MPI_Info info, MPI_Request* request) {
  return allreduce_init_call(sendbuf, recvbuf, count, datatype, op, comm, request, [&] {
    return PMPIX_Allreduce_init(sendbuf, recvbuf, count, datatype, op, comm, info, request);
  });
}
#endif
