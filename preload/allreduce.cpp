/// \file
/// libtcoll_mpi.so: MPI_Allreduce and MPI_Iallreduce through tcoll.
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

/// The path of an MPI_Iallreduce of `bytes` on `s` whose rule or built-in choice is `a`:
/// `one_node_choice` and the transport it runs on, from what blocking collectives have
/// created. Where that is not enough, `missing` gets what is (`comm_state::setup_*`), since
/// creating it is a collective step and a non-blocking start must stay local (a rank may
/// start MPI_Iallreduce and then wait for a message its peer sends before starting its
/// own). A one-rank communicator needs nothing: its set-up is local.
algorithm_id nonblocking_path(coll c, const comm_state& s, std::size_t bytes, algorithm_id a,
                              unsigned& missing) {
  missing = 0;
  if (s.size == 1 || bytes == 0) return a;
  const bool consults_node = bytes >= config().shm_native_below_bytes && config().shm &&
                             !chosen_by_rule(c, bytes); // as one_node_choice
  if (consults_node && !s.node_checked) {
    missing = comm_state::setup_flat;
    return a;
  }
  if (consults_node && s.node) a = choose_shared_memory(bytes, s.size);
  if (a == algorithm_id::passthrough) return a;
  if (a == algorithm_id::hierarchical) {
    if (!(config().shm ? s.node_hier != nullptr : s.hier != nullptr))
      missing = comm_state::setup_hierarchy;
    return a;
  }
  if (!s.node_checked || (!s.node && !s.flat) || !s.engine_core_known)
    missing = comm_state::setup_flat;
  return a;
}

/// State of one MPI_Iallreduce run by tcoll: the generalized request's extra state.
///
/// It holds no `tcoll::request`: MPI may call `free_fn` from inside `PMPI_Grequest_complete`
/// on the engine thread (Open MPI does when the user's MPI_Wait released the request first),
/// and a request's destructor there would wait for the very task that is completing. The
/// engine keeps the task alive until it has finished.
struct ireq {
  MPI_Request handle = MPI_REQUEST_NULL;
  std::atomic<int> code{MPI_SUCCESS};
};

int query_fn(void* extra, MPI_Status* status) {
  const int code = static_cast<ireq*>(extra)->code.load();
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  status->MPI_ERROR = code;
  return code;
}
int free_fn(void* extra) {
  delete static_cast<ireq*>(extra);
  return MPI_SUCCESS;
}
int cancel_fn(void*, int) {
  return MPI_SUCCESS;
} // a started collective runs to its end

/// Completes the generalized request of `r` with the collective's outcome; runs on the
/// engine thread in every outcome (also for a collective skipped because its transport had
/// broken or was destroyed), so an MPI_Wait on it never hangs.
struct complete_ireq {
  ireq* r;
  void operator()(std::exception_ptr error) const noexcept {
    if (error) {
      r->code.store(MPI_ERR_OTHER);
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        print_error(coll::iallreduce, e.what()); // MPI_Wait returns the code
      } catch (...) {
        print_error(coll::iallreduce, "unknown error");
      }
    }
    PMPI_Grequest_complete(r->handle);
  }
};

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

/// Completes one run of a persistent allreduce (see `finish_persistent`).
struct complete_persistent {
  persistent_collective* p;
  void operator()(std::exception_ptr error) const noexcept {
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        print_error(p->c, e.what());
      } catch (...) {
        print_error(p->c, "unknown error");
      }
    }
    finish_persistent(*p, error != nullptr);
  }
};

/// What a non-blocking start (MPI_Iallreduce, MPI_Allreduce_init) decided, locally.
struct local_start {
  bool to_mpi = false; ///< hand the call to MPI
  int error = -1;      ///< >= 0: return this code (already reported)
  comm_state* state = nullptr;
  reduction r;
  algorithm_id a = algorithm_id::passthrough;
  std::size_t n = 0;
  bool decided = false; ///< the path was decided (not a fallback): count the call
};

/// The checks and the path of a non-blocking allreduce start of collective `c` (counted,
/// also where it goes to MPI); local: no communication (see `nonblocking_path`).
template <class Count>
local_start decide_local_start(coll c, const void* sendbuf, void* recvbuf, Count count,
                               MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                               MPI_Request* request) {
  local_start d;
  if (!mpi_active()) {
    count_fallback(c, fallback::not_initialized);
    d.to_mpi = true;
    return d;
  }
  d.r = classify_reduction(datatype, op);
  fallback why = d.r.why;
  // the thread level is fixed once MPI is initialised: asked once
  static const int level = [] {
    int provided = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&provided);
    return provided;
  }();
  bool usable = d.r.ok() && !is_intercomm(comm) && count_fits(count) && recvbuf != nullptr &&
                sendbuf != nullptr && comm != MPI_COMM_NULL && request != nullptr;
  if (d.r.ok() && !usable)
    why = is_intercomm(comm) ? fallback::intercomm : fallback::arguments;
  else if (usable && level != MPI_THREAD_MULTIPLE) {
    usable = false;
    why = fallback::thread_level;
  }
  if (!usable) {
    count_fallback(c, why);
    d.to_mpi = true;
    return d;
  }
  if (!config().error.empty()) {
    d.error = report_settings_error(c, comm);
    return d;
  }
  d.n = static_cast<std::size_t>(count);
  const std::size_t bytes = d.n * d.r.size;
  d.a = d.n == 0 ? algorithm_id::passthrough : choose(c, bytes);
  try {
    d.state = &state_of(comm); // local: an attribute, no communication
  } catch (const std::exception& e) {
    d.error = report_error(c, comm, MPI_ERR_OTHER, e.what());
    return d;
  }
  unsigned missing = 0;
  d.a = nonblocking_path(c, *d.state, bytes, d.a, missing);
  if (missing) { // MPI starts a non-blocking collective locally: no set-up here
    d.state->want_setup(missing);
    count_fallback(c, fallback::not_set_up);
    d.to_mpi = true;
    return d;
  }
  // tcoll's engine thread runs the collective while the caller typically polls MPI_Wait:
  // where a rank is bound to one CPU the two share it and every step waits for a time
  // slice (4-100x slower than MPI's own: docs/benchmarks.md, "The persistent allreduce under
  // the preload"), so the built-in choice leaves the call to MPI there; a
  // TCOLL_ALLREDUCE_ALGO rule still sends it to tcoll
  if (d.a != algorithm_id::passthrough && !d.state->engine_core && d.n > 0 && d.state->size > 1 &&
      !chosen_by_rule(c, bytes)) {
    count_fallback(c, fallback::no_spare_core);
    d.to_mpi = true;
    return d;
  }
  d.to_mpi = d.a == algorithm_id::passthrough;
  d.decided = true;
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
  const local_start d = decide_local_start(c, sendbuf, recvbuf, count, datatype, op, comm, request);
  if (d.error >= 0) return d.error;
  if (d.decided) {
    count_call(c, d.a, d.n * d.r.size, comm);
    count_entry_point<Count>(c, d.a);
  }
  if (d.to_mpi) return pmpi();
  ireq* q = new (std::nothrow) ireq;
  if (q == nullptr) return report_error(c, comm, MPI_ERR_NO_MEM, "out of memory");
  const int rc = PMPI_Grequest_start(&query_fn, &free_fn, &cancel_fn, q, &q->handle);
  if (rc != MPI_SUCCESS) {
    delete q;
    return report_error(c, comm, rc, "PMPI_Grequest_start failed");
  }
  try {
    queue_allreduce(c, *d.state, d.a, d.r, sendbuf, recvbuf, d.n, complete_ireq{q});
  } catch (const std::exception& e) {
    // Nothing was queued: complete the request with the error and hand it back, so the
    // caller's MPI_Wait sees it too when its error handler returns.
    q->code.store(MPI_ERR_OTHER);
    PMPI_Grequest_complete(q->handle);
    *request = q->handle;
    return report_error(c, comm, MPI_ERR_OTHER, e.what());
  }
  *request = q->handle;
  return MPI_SUCCESS;
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
  const local_start d = decide_local_start(c, sendbuf, recvbuf, count, datatype, op, comm, request);
  if (d.error >= 0) return d.error;
  if (d.decided) count_entry_point<Count>(c, d.a);
  if (d.to_mpi) {
    if (d.decided) count_call(c, d.a, d.n * d.r.size, comm); // passthrough: counted once
    return pmpi();
  }
  auto p = std::make_unique<persistent_collective>();
  p->c = c;
  p->comm = comm;
  p->state = d.state;
  p->algorithm = d.a;
  p->bytes = d.n * d.r.size;
  p->run = [a = d.a, r = d.r, sendbuf, recvbuf, n = d.n](persistent_collective& self) {
    queue_allreduce(self.c, *self.state, a, r, sendbuf, recvbuf, n, complete_persistent{&self});
  };
  if (const int rc = make_persistent(std::move(p), request); rc != MPI_SUCCESS)
    return report_error(c, comm, rc, "PMPI_Recv_init (the persistent request) failed");
  return MPI_SUCCESS;
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
