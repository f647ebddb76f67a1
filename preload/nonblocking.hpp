#pragma once
/// \file
/// What every non-blocking start the preload runs through tcoll shares (MPI_Iallreduce in
/// allreduce.cpp, the other non-blocking collectives in nonblocking.cpp): the local decision of
/// its path, and the generalized request that tcoll's engine thread completes.
#include "tcoll_mpi.hpp"

#include <atomic>
#include <exception>
#include <new>
#include <optional>
#include <type_traits>

namespace tcoll::preload {

/// The path of a non-blocking start of collective `c` moving `bytes` on `s` whose rule or
/// built-in choice is `a`: where no rule covers the size and the node is consulted
/// (`consults_node`), `node_choice(s)` and the transport it runs on, from what blocking
/// collectives have created. Where that is not enough, `missing` gets what is
/// (`comm_state::setup_*`), since creating it is a collective step and a non-blocking start
/// must stay local (a rank may start a non-blocking collective and then wait for a message
/// its peer sends before starting its own). A one-rank communicator needs nothing: its
/// set-up is local.
/// `per_rank`: a collective whose ranks move sizes of their own (`per_rank_size`), routed
/// without a size, where an empty part on one rank says nothing of the others'.
template <class NodeChoice>
algorithm_id nonblocking_path(const comm_state& s, std::size_t bytes, algorithm_id a,
                              bool consults_node, NodeChoice&& node_choice, unsigned& missing,
                              bool per_rank = false) {
  missing = 0;
  if (s.size == 1 || (bytes == 0 && !per_rank)) return a;
  if (consults_node && !s.node_checked) {
    missing = comm_state::setup_flat;
    return a;
  }
  if (consults_node && s.node) a = node_choice(s);
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

/// What a non-blocking start (or a persistent one's initialisation) decided, locally.
struct local_start {
  bool to_mpi = false; ///< hand the call to MPI
  int error = -1;      ///< >= 0: return this code (already reported)
  comm_state* state = nullptr;
  algorithm_id a = algorithm_id::passthrough;
  bool decided = false; ///< the path was decided (not a fallback): count the call
};

/// The decision of a non-blocking start of collective `c` on `comm` moving `bytes` (its
/// selection rules' size; for a `per_rank_size` collective this rank's part, which decides
/// nothing) whose checks found `why` (nullopt: tcoll may run it). Counts the fallbacks; the
/// caller counts a decided call. Local: no communication. `consults_node` and `node_choice`
/// as for `nonblocking_path`. Needs MPI_THREAD_MULTIPLE (tcoll's engine is a thread that
/// calls MPI), a communicator whose tcoll state blocking calls have set up, and, for tcoll's
/// built-in choice, a spare core for the engine thread.
template <class NodeChoice>
local_start decide_nonblocking(coll c, MPI_Comm comm, std::optional<fallback> why,
                               std::size_t bytes, bool consults_node, NodeChoice&& node_choice) {
  local_start d;
  if (!mpi_active()) {
    count_fallback(c, fallback::not_initialized);
    d.to_mpi = true;
    return d;
  }
  // the thread level is fixed once MPI is initialised: asked once
  static const int level = [] {
    int provided = MPI_THREAD_SINGLE;
    PMPI_Query_thread(&provided);
    return provided;
  }();
  if (!why && level != MPI_THREAD_MULTIPLE) why = fallback::thread_level;
  if (why) {
    count_fallback(c, *why);
    d.to_mpi = true;
    return d;
  }
  if (!config().error.empty()) {
    d.error = report_settings_error(c, comm);
    return d;
  }
  const bool per_rank = per_rank_size(c);
  d.a = bytes == 0 && !per_rank ? algorithm_id::passthrough : choose(c, bytes);
  try {
    d.state = &state_of(comm); // local: an attribute, no communication
  } catch (const std::exception& e) {
    d.error = report_error(c, comm, MPI_ERR_OTHER, e.what());
    return d;
  }
  unsigned missing = 0;
  d.a = nonblocking_path(*d.state, bytes, d.a, consults_node && !chosen_by_rule(c, bytes),
                         node_choice, missing, per_rank);
  if (missing) { // MPI starts a non-blocking collective locally: no set-up here
    d.state->want_setup(missing);
    count_fallback(c, fallback::not_set_up);
    d.to_mpi = true;
    return d;
  }
  // tcoll's engine thread runs the collective while the caller typically polls MPI_Wait:
  // where a rank is bound to one CPU the two share it and every step waits for a time
  // slice (4-100x slower than MPI's own: docs/benchmarks.md, "The persistent allreduce under
  // the preload"), so the built-in choice leaves the call to MPI there; a rule of the
  // collective's selection variable still sends it to tcoll
  if (d.a != algorithm_id::passthrough && !d.state->engine_core && (bytes > 0 || per_rank) &&
      d.state->size > 1 && !chosen_by_rule(c, bytes)) {
    count_fallback(c, fallback::no_spare_core);
    d.to_mpi = true;
    return d;
  }
  d.to_mpi = d.a == algorithm_id::passthrough;
  d.decided = true;
  return d;
}

/// MPI's own entry point for a call the wrapper hands to MPI (`pmpi()` calls it): a reference
/// to the exported function's lambda, valid for the wrapper's call. Not a template parameter,
/// so the wrapper bodies that MPI_Ibcast and MPI_Bcast_init share are compiled once.
class pmpi_call {
public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, pmpi_call>)
      pmpi_call(F&& f) // NOLINT: implicit, from the lambda the exported function writes
      : object_(&f),
        call_([](void* object) { return (*static_cast<std::remove_reference_t<F>*>(object))(); }) {}
  int operator()() const { return call_(object_); }

private:
  void* object_;
  int (*call_)(void*);
};

/// State of one non-blocking collective run by tcoll: the generalized request's extra state.
///
/// It holds no `tcoll::request`: MPI may call `free_fn` from inside `PMPI_Grequest_complete`
/// on the engine thread (Open MPI does when the user's MPI_Wait released the request first),
/// and a request's destructor there would wait for the very task that is completing. The
/// engine keeps the task alive until it has finished.
struct ireq {
  MPI_Request handle = MPI_REQUEST_NULL;
  std::atomic<int> code{MPI_SUCCESS};
  coll c = coll::iallreduce;
};

inline int ireq_query(void* extra, MPI_Status* status) {
  const int code = static_cast<ireq*>(extra)->code.load();
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  status->MPI_ERROR = code;
  return code;
}
inline int ireq_free(void* extra) {
  delete static_cast<ireq*>(extra);
  return MPI_SUCCESS;
}
inline int ireq_cancel(void*, int) {
  return MPI_SUCCESS;
} // a started collective runs to its end

/// Reports `error` (null: none) of a collective of `c` run on the engine thread.
inline void print_outcome(coll c, std::exception_ptr error) noexcept {
  if (!error) return;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    print_error(c, e.what()); // MPI_Wait returns the code
  } catch (...) {
    print_error(c, "unknown error");
  }
}

/// What the engine thread calls with a queued collective's outcome, in every outcome (also
/// for a collective skipped because its transport had broken or was destroyed), so an
/// MPI_Wait on it never hangs: it completes the generalized request of a non-blocking call
/// (`call`) or one run of a persistent request (`run`, see `finish_persistent`). One type for
/// both, so a wrapper's queued body, which the two forms share, is compiled once.
struct completion {
  ireq* call = nullptr;
  persistent_collective* run = nullptr;
  void operator()(std::exception_ptr error) const noexcept {
    if (call) {
      if (error) call->code.store(MPI_ERR_OTHER);
      print_outcome(call->c, error);
      PMPI_Grequest_complete(call->handle);
    } else {
      print_outcome(run->c, error);
      finish_persistent(*run, error != nullptr);
    }
  }
};

/// Starts a generalized request for a call of collective `c` on `comm` and has `queue(done)`
/// queue the collective, `done` completing the request on the engine thread; the request
/// goes to `*request`. Where `queue` throws, nothing was queued: the request is completed
/// with the error and handed back too (so the caller's MPI_Wait sees it when its error
/// handler returns), and the error is reported.
template <class Queue>
int start_request(coll c, MPI_Comm comm, MPI_Request* request, Queue&& queue) {
  ireq* q = new (std::nothrow) ireq;
  if (q == nullptr) return report_error(c, comm, MPI_ERR_NO_MEM, "out of memory");
  q->c = c;
  const int rc = PMPI_Grequest_start(&ireq_query, &ireq_free, &ireq_cancel, q, &q->handle);
  if (rc != MPI_SUCCESS) {
    delete q;
    return report_error(c, comm, rc, "PMPI_Grequest_start failed");
  }
  try {
    queue(completion{.call = q});
  } catch (const std::exception& e) {
    q->code.store(MPI_ERR_OTHER);
    PMPI_Grequest_complete(q->handle);
    *request = q->handle;
    return report_error(c, comm, MPI_ERR_OTHER, e.what());
  }
  *request = q->handle;
  return MPI_SUCCESS;
}

/// Makes the persistent request of collective `c` on `comm` that `d` decided tcoll runs
/// (`bytes` per run, counted at every MPI_Start): each MPI_Start calls `queue(done)`, which
/// queues one run, `done` (a `completion`) completing it on the engine thread.
/// `queue` is copied into the request and must hold everything a run reads.
template <class Queue>
int init_persistent(coll c, MPI_Comm comm, const local_start& d, std::size_t bytes,
                    MPI_Request* request, Queue queue) {
  auto p = std::make_unique<persistent_collective>();
  p->c = c;
  p->comm = comm;
  p->state = d.state;
  p->algorithm = d.a;
  p->bytes = bytes;
  p->run = [queue = std::move(queue)](persistent_collective& self) {
    queue(completion{.run = &self});
  };
  if (const int rc = make_persistent(std::move(p), request); rc != MPI_SUCCESS)
    return report_error(c, comm, rc, "PMPI_Recv_init (the persistent request) failed");
  return MPI_SUCCESS;
}

} // namespace tcoll::preload
