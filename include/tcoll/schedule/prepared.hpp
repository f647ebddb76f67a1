#pragma once
/// \file
/// Prepared (persistent) collectives, in the manner of MPI-4's `MPI_Bcast_init` ...
/// `MPI_Start` and Gloo's algorithm objects.
///
/// - `prepare_allreduce`, `prepare_broadcast`, ... `prepare_barrier`, one for every
///   collective of the table with the arguments of its non-blocking form: the arguments are
///   checked and bound once, buffers included (as MPI's `*_init` binds them), and every
///   `run()` or `start()` performs the same collective again with nothing checked, copied
///   or allocated (the transport's own requests aside) after the first start: a
///   `prepared_collective`.
/// - `prepared_allreduce`: built once for (transport, count, type, op, algorithm, in-place or
///   not) with the buffers given per call, it records the algorithm's steps and owns the
///   scratch and staging space they need, so a repeated call allocates nothing (the
///   transport's own requests aside: an MPI message split into more than one piece
///   allocates its request array). `automatic` is resolved once, for the prepared count.
///   `passthrough` calls the vendor allreduce each time.
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "../collectives.hpp"
#include "engine.hpp"
#include "nonblocking.hpp"

namespace tcoll {

namespace detail {

/// Calls `f(concrete_algorithm)` with what `algo` runs for `count` elements of `T` under
/// `Op` on `Tr` of `ranks` ranks (resolving `automatic` as `allreduce` does).
template <class Tr, class T, class Op, class Algo, class F>
void with_resolved_algorithm(const Algo& algo, std::size_t count, int ranks, F&& f) {
  if constexpr (std::is_same_v<Algo, automatic>) {
    constexpr algorithm_support can{commutative_op<Op>, has_native_allreduce<Tr, T, Op>};
    visit_algorithm<can>(
        algo.template choose_for<Tr>(count * sizeof(T), ranks, can.commutative, can.native), algo,
        f);
  } else {
    f(algo);
  }
}

/// The recorded steps of one allreduce shape (count, in place or not) on one rank.
struct recorded_allreduce {
  step_recorder steps;
  std::size_t count = 0;
  bool in_place = true;
  bool native = false; ///< passthrough: the vendor allreduce, no steps
  /// in_segment: the collective area, no steps (`segment_knobs`)
  bool segment = false;
  in_segment segment_knobs{};
};

/// Records what `algo` does for `count` elements.
template <class Tr, class T, class Op, class Algo>
recorded_allreduce record_allreduce(const Tr& t, std::size_t count, bool in_place,
                                    const Algo& algo) {
  recorded_allreduce r;
  r.count = count;
  r.in_place = in_place;
  with_resolved_algorithm<Tr, T, Op>(algo, count, t.size(), [&](const auto& a) {
    using A = std::remove_cvref_t<decltype(a)>;
    if constexpr (std::is_same_v<A, passthrough>) {
      // spelled dependent on A: nvcc's front end evaluates a non-dependent assertion of a
      // generic lambda even in a discarded branch
      static_assert(has_native_allreduce<Tr, T, Op> || !std::is_same_v<A, passthrough>,
                    "tcoll: passthrough needs a transport with a vendor allreduce (mpi, nccl)");
      r.native = true;
    } else if constexpr (std::is_same_v<A, in_segment>) {
      r.segment = true;
      r.segment_knobs = a;
    } else {
      static_assert(allreduce_algorithm<A>, "tcoll: not an allreduce algorithm");
      check_order<Op, A>();
      a.allreduce(r.steps, layout{t.rank(), t.size(), count, sizeof(T), 0, in_place});
    }
  });
  return r;
}

/// Replays `rec` in message space `tag` with the lent workspace (which must cover
/// `rec.steps.scratch_count` and, on staging transports, `staging_count` elements).
template <transport Tr, class T, class Op, reducer R>
void replay_allreduce(Tr& t, int tag, const recorded_allreduce& rec, const T* sendbuf, T* recvbuf,
                      const Op& op, R& red, T* scratch, std::size_t scratch_count, T* staging,
                      std::size_t staging_count) {
  if (rec.native) {
    if constexpr (requires { t.native_allreduce(sendbuf, recvbuf, rec.count, op); })
      t.native_allreduce(sendbuf, recvbuf, rec.count, op);
    return;
  }
  if (rec.segment)
    return in_segment_allreduce_on(t, tag, sendbuf, recvbuf, rec.count, op, rec.segment_knobs, red);
  executor<Tr, R, T, Op> ex(t, red, op, sendbuf, rec.count, recvbuf, rec.count, tag);
  ex.use_workspace(scratch, scratch_count, staging, staging_count);
  ex.reserve(rec.steps.scratch_count, rec.steps.staging_count);
  for (const auto& round : rec.steps.rounds) {
    ex.round_begin();
    for (const step& s : round) ex.add(s);
    ex.round_end();
  }
}

/// One allreduce shape (`count` elements of `T`, in place or not) on communicator `C`,
/// prepared once and run many times in message spaces drawn by `begin_on`: on a transport,
/// the algorithm's recorded steps replayed with a lent workspace (nothing decided or
/// allocated per call); on a composed machine, the machine's own allreduce (which needs
/// no workspace). The overlap scheduler's and the sparse adaptor's buckets are these.
template <class C, class T, class Op, class Algo>
class allreduce_program;

template <transport Tr, class T, class Op, class Algo>
class allreduce_program<Tr, T, Op, Algo> {
public:
  allreduce_program() = default;
  allreduce_program(const Tr& t, std::size_t count, bool in_place, const Algo& algo)
      : rec_(record_allreduce<Tr, T, Op>(t, count, in_place, algo)) {}
  /// Elements of scratch and of staging a run needs lent (`run`'s workspace).
  std::size_t scratch_count() const noexcept { return rec_.steps.scratch_count; }
  std::size_t staging_count() const noexcept {
    return transport_is_zero_copy<Tr>() ? 0 : rec_.steps.staging_count;
  }
  /// Runs the allreduce in message space `tag` with the lent workspace.
  template <reducer R>
  void run(Tr& t, int tag, const T* sendbuf, T* recvbuf, const Op& op, R& red, T* scratch,
           std::size_t scratch_count, T* staging, std::size_t staging_count) const {
    replay_allreduce(t, tag, rec_, sendbuf, recvbuf, op, red, scratch, scratch_count, staging,
                     staging_count);
  }
  /// Bytes this rank sends per run; `exact` is cleared where that is the ring's estimate
  /// (the vendor allreduce, whose steps tcoll cannot see).
  std::size_t bytes_sent(int ranks, bool& exact) const {
    if (rec_.native || rec_.segment) {
      exact = false;
      return ring_bytes_estimate(ranks, rec_.count, sizeof(T));
    }
    std::size_t elems = 0;
    for (const auto& round : rec_.steps.rounds)
      for (const auto& s : round)
        if (s.kind == step_kind::send) elems += s.src.count;
    return elems * sizeof(T);
  }

private:
  recorded_allreduce rec_;
};

/// The program a prepared allreduce runs on `C`: the communicator's own
/// `prepared_program<T, Op, Algo>` where it names one (a composed machine, whose phases are
/// not one step list: see hierarchical.hpp), else the recorded steps of a transport.
template <class C, class T, class Op, class Algo>
struct program_for {
  using type = allreduce_program<C, T, Op, Algo>;
};
template <class C, class T, class Op, class Algo>
requires requires {
  typename C::template prepared_program<T, Op, Algo>;
}
struct program_for<C, T, Op, Algo> {
  using type = typename C::template prepared_program<T, Op, Algo>;
};
template <class C, class T, class Op, class Algo>
using program_for_t = typename program_for<C, T, Op, Algo>::type;

} // namespace detail

/// A prepared allreduce (see the file comment) on any communicator: a transport (its steps
/// recorded once) or a composed machine such as `hierarchical<Intra, Inter>` (its own
/// allreduce each call). Not thread-safe: one call (or one started request) at a time;
/// `start` while a previous start is unfinished waits for it first.
template <communicator C, class T, class Op = sum_op, class Algo = detail::default_algorithm_t<C>,
          reducer R = cpu_reducer>
class prepared_allreduce {
public:
  /// Prepares an allreduce of `count` elements; `in_place` says whether calls pass
  /// `sendbuf == recvbuf`.
  prepared_allreduce(C& comm, std::size_t count, bool in_place = true, const Op& op = {},
                     const Algo& algo = {}, R red = {})
      : comm_(&comm), op_(op), red_(std::move(red)), count_(count), in_place_(in_place) {
    detail::check_support<R, Op, T>();
    detail::check_count(count, 1, sizeof(T), "prepared_allreduce", comm.rank());
    program_ = {comm, count, in_place, algo};
    scratch_ = red_.template allocate<T>(program_.scratch_count());
    staging_ = red_.template allocate<T>(program_.staging_count());
  }
  prepared_allreduce(const prepared_allreduce&) = delete;
  prepared_allreduce& operator=(const prepared_allreduce&) = delete;
  ~prepared_allreduce() { pending_ = request(); } // wait for a started call

  std::size_t count() const noexcept { return count_; }
  bool in_place() const noexcept { return in_place_; }
  /// Scratch plus staging elements owned (what a call would otherwise allocate).
  std::size_t workspace_elements() const noexcept {
    return program_.scratch_count() + program_.staging_count();
  }

  /// Blocking call: the allreduce of `count()` elements from `sendbuf` into `recvbuf`.
  void run(const T* sendbuf, T* recvbuf) {
    check(sendbuf, recvbuf);
    pending_ = request(); // a started call goes first (its tags were drawn first)
    const auto tags = detail::begin_on(*comm_);
    detail::guarded_on(*comm_, [&] { replay(tags, sendbuf, recvbuf); });
  }
  /// In-place blocking call.
  void run(T* data) { run(data, data); }

  /// Non-blocking call on the communicator's engine; the returned request is also kept, so
  /// the next call waits for it. The task object is reused: nothing is allocated after
  /// the first start.
  request& start(const T* sendbuf, T* recvbuf) {
    check(sendbuf, recvbuf);
    pending_ = request();
    if (!task_) task_ = std::make_shared<task>(*comm_, call{this});
    task_->body().send = sendbuf;
    task_->body().recv = recvbuf;
    pending_ = request(detail::submit_task(detail::engine_of(*comm_), task_));
    return pending_;
  }
  request& start(T* data) { return start(data, data); }

private:
  /// One started call: the buffers of this start.
  struct call {
    prepared_allreduce* owner;
    const T* send = nullptr;
    T* recv = nullptr;
    void operator()(const detail::collective_tags_t<C>& tags) const {
      owner->replay(tags, send, recv);
    }
  };
  using task = detail::collective_task<C, call>;

  void check(const T* sendbuf, T* recvbuf) const {
    const int rank = comm_->rank();
    detail::check_allreduce_args(sendbuf, recvbuf, count_, rank);
    if (count_ && (sendbuf == recvbuf) != in_place_)
      throw invalid_argument(std::string("prepared_allreduce: prepared ") +
                                 (in_place_ ? "in place" : "out of place") + " but called " +
                                 (in_place_ ? "out of place" : "in place"),
                             rank);
  }
  void replay(const detail::collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf) {
    program_.run(*comm_, tags, sendbuf, recvbuf, op_, red_, scratch_.data(),
                 program_.scratch_count(), staging_.data(), program_.staging_count());
  }

  C* comm_;
  Op op_;
  R red_;
  std::size_t count_ = 0;
  bool in_place_ = true;
  detail::program_for_t<C, T, Op, Algo> program_;
  typename R::template buffer<T> scratch_{};
  typename R::template buffer<T> staging_{};
  std::shared_ptr<task> task_;
  request pending_;
};

/// A collective whose arguments were checked and bound once (`prepare_*`): `run()` performs
/// it here, `start()` queues it on the communicator's engine, as often as wanted, each time
/// in the next message space (every rank runs and starts its prepared collectives in the
/// same order as its other collectives: MPI's rule). The bound buffers must stay valid while
/// the object lives. One run or start at a time: either waits for a started run first
/// (where MPI calls starting an active request erroneous). Moving the object is allowed
/// while nothing is started. Destroying it waits for a started run.
template <communicator C, class Body, class Done = detail::no_completion>
class prepared_collective {
public:
  /// `body(tags)` performs the collective in the message spaces `tags`; `done(error)`, where
  /// given, runs on the engine thread when a started run finishes, in every outcome (a
  /// completion for an integration such as an MPI request; `run()` does not call it).
  prepared_collective(C& comm, Body body, Done done = {})
      : comm_(&comm), task_(std::make_shared<task>(comm, std::move(body), std::move(done))) {}
  prepared_collective(prepared_collective&&) noexcept = default;
  /// Waits for a started run, except from that run's own `done` (on the engine thread,
  /// which keeps the task alive until it has finished), which may destroy the object once
  /// the `start()` that queued the run has returned.
  ~prepared_collective() {
    pending_ = request();
    if (started_ && task_ && !task_->finished() && !task_->running_here()) task_->wait();
  }

  /// Runs the collective here, now (after a started run, which goes first: its message
  /// space was drawn first). Throws what the collective throws; the communicator is then
  /// broken.
  void run() {
    settle();
    const auto tags = detail::begin_on(*comm_);
    detail::guarded_on(*comm_, [&] { task_->body()(tags); });
  }

  /// Queues the collective on the communicator's engine (its message space drawn now) and
  /// returns its request, which the object keeps: the next `run`, `start` or the destructor
  /// waits for it. The task is the same object every time: nothing is allocated.
  request& start() {
    settle();
    pending_ = request(detail::submit_task(detail::engine_of(*comm_), task_));
    started_ = true;
    return pending_;
  }

  /// The request of the last start (complete when none is pending).
  request& pending() noexcept { return pending_; }

private:
  /// Waits for a started run, also where its request was moved out of `pending()`.
  void settle() {
    pending_ = request();
    if (started_ && task_ && !task_->finished()) task_->wait();
  }

  using task = detail::collective_task<C, Body, Done>;

  C* comm_;
  std::shared_ptr<task> task_;
  request pending_;
  bool started_ = false; ///< queued at least once (a never-queued task never finishes)
};

/// Prepared `allreduce` with its buffers bound (`MPI_Allreduce_init`); `prepared_allreduce`
/// takes the buffers per call instead and records the algorithm's steps.
template <communicator C, class T, class Op = sum_op, class Algo = detail::default_algorithm_t<C>,
          reducer R = cpu_reducer>
[[nodiscard]] auto prepare_allreduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                     const Op& op = {}, const Algo& algo = {}, R red = {}) {
  return prepared_collective(
      comm, detail::checked_allreduce(comm, sendbuf, recvbuf, count, op, algo, red));
}

/// Prepared `reduce_scatter` (`MPI_Reduce_scatter_block_init`).
template <communicator C, class T, class Op = sum_op, block_algorithm Algo = ring,
          reducer R = cpu_reducer>
[[nodiscard]] auto prepare_reduce_scatter(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                          const Op& op = {}, const Algo& algo = {}, R red = {}) {
  return prepared_collective(
      comm, detail::checked_reduce_scatter(comm, sendbuf, recvbuf, count, op, algo, red));
}

/// Prepared `reduce_scatterv` (`MPI_Reduce_scatter_init`); the counts are copied.
template <communicator C, class T, class Op = sum_op, reducer R = cpu_reducer>
[[nodiscard]] auto prepare_reduce_scatterv(C& comm, const T* sendbuf, T* recvbuf,
                                           std::span<const std::size_t> recv_counts,
                                           const Op& op = {}, const ring& algo = {}, R red = {}) {
  return prepared_collective(
      comm, detail::checked_reduce_scatterv(comm, sendbuf, recvbuf, recv_counts, op, algo, red));
}

/// Prepared `allgather` (`MPI_Allgather_init`).
template <communicator C, class T, block_algorithm Algo = ring, reducer R = cpu_reducer>
[[nodiscard]] auto prepare_allgather(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                     const Algo& algo = {}, R red = {}) {
  return prepared_collective(comm,
                             detail::checked_allgather(comm, sendbuf, recvbuf, count, algo, red));
}

/// Prepared `allgatherv` (`MPI_Allgatherv_init`); the counts and displacements are copied.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] auto prepare_allgatherv(C& comm, const T* sendbuf, std::size_t send_count, T* recvbuf,
                                      std::span<const std::size_t> recv_counts,
                                      std::span<const std::size_t> recv_displs,
                                      const ring& algo = {}, R red = {}) {
  return prepared_collective(comm, detail::checked_allgatherv(comm, sendbuf, send_count, recvbuf,
                                                              recv_counts, recv_displs, algo, red));
}

/// Prepared `broadcast` (`MPI_Bcast_init`).
template <communicator C, class T, broadcast_algorithm Algo = binomial_tree,
          reducer R = cpu_reducer>
[[nodiscard]] auto prepare_broadcast(C& comm, T* buffer, std::size_t count, int root,
                                     const Algo& algo = {}, R red = {}) {
  return prepared_collective(comm, detail::checked_broadcast(comm, buffer, count, root, algo, red));
}

/// Prepared `reduce` to `root` (`MPI_Reduce_init`); `recvbuf` is read at the root only.
template <communicator C, class T, class Op = sum_op, reduce_algorithm Algo = binomial_tree,
          reducer R = cpu_reducer>
[[nodiscard]] auto prepare_reduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                  int root, const Op& op = {}, const Algo& algo = {}, R red = {}) {
  return prepared_collective(
      comm, detail::checked_reduce(comm, sendbuf, recvbuf, count, root, op, algo, red));
}

/// Prepared `alltoall` (`MPI_Alltoall_init`); `alltoall_by_size` chooses at every run.
template <communicator C, class T, alltoall_algorithm A = alltoall_by_size, reducer R = cpu_reducer>
[[nodiscard]] auto prepare_alltoall(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                    const A& algo = {}, R red = {}) {
  return prepared_collective(comm,
                             detail::checked_alltoall(comm, sendbuf, recvbuf, count, algo, red));
}

/// Prepared `alltoallv` (`MPI_Alltoallv_init`); the counts and displacements are copied.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] auto prepare_alltoallv(C& comm, const T* sendbuf,
                                     std::span<const std::size_t> send_counts,
                                     std::span<const std::size_t> send_displs, T* recvbuf,
                                     std::span<const std::size_t> recv_counts,
                                     std::span<const std::size_t> recv_displs,
                                     const pairwise_exchange& algo = {}, R red = {}) {
  return prepared_collective(comm, detail::checked_alltoallv(comm, sendbuf, send_counts,
                                                             send_displs, recvbuf, recv_counts,
                                                             recv_displs, algo, red));
}

/// Prepared `gather` (`MPI_Gather_init`).
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] auto prepare_gather(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                  int root, const linear& algo = {}, R red = {}) {
  return prepared_collective(
      comm, detail::checked_gather(comm, sendbuf, recvbuf, count, root, algo, red));
}

/// Prepared `gatherv` (`MPI_Gatherv_init`); the counts and displacements are copied.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] auto prepare_gatherv(C& comm, const T* sendbuf, std::size_t send_count, T* recvbuf,
                                   std::span<const std::size_t> recv_counts,
                                   std::span<const std::size_t> recv_displs, int root,
                                   const linear& algo = {}, R red = {}) {
  return prepared_collective(comm,
                             detail::checked_gatherv(comm, sendbuf, send_count, recvbuf,
                                                     recv_counts, recv_displs, root, algo, red));
}

/// Prepared `scatter` (`MPI_Scatter_init`).
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] auto prepare_scatter(C& comm, const T* sendbuf, T* recvbuf, std::size_t count,
                                   int root, const linear& algo = {}, R red = {}) {
  return prepared_collective(
      comm, detail::checked_scatter(comm, sendbuf, recvbuf, count, root, algo, red));
}

/// Prepared `scatterv` (`MPI_Scatterv_init`); the counts and displacements are copied.
template <communicator C, class T, reducer R = cpu_reducer>
[[nodiscard]] auto
prepare_scatterv(C& comm, const T* sendbuf, std::span<const std::size_t> send_counts,
                 std::span<const std::size_t> send_displs, T* recvbuf, std::size_t recv_count,
                 int root, const linear& algo = {}, R red = {}) {
  return prepared_collective(comm, detail::checked_scatterv(comm, sendbuf, send_counts, send_displs,
                                                            recvbuf, recv_count, root, algo, red));
}

/// Prepared `barrier` (`MPI_Barrier_init`).
template <communicator C, barrier_algorithm Algo = dissemination, reducer R = cpu_reducer>
[[nodiscard]] auto prepare_barrier(C& comm, const Algo& algo = {}, R red = {}) {
  return prepared_collective(comm, detail::checked_barrier(comm, algo, red));
}

} // namespace tcoll
