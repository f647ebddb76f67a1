#pragma once
/// \file
/// Prepared (persistent) allreduce, in the manner of `MPI_Allreduce_init` and Gloo's
/// algorithm objects: built once for (transport, count, type, op, algorithm, in-place or
/// not), it records the algorithm's steps and owns the scratch and staging space they need,
/// so a repeated call allocates nothing (the transport's own requests aside: an MPI message
/// split into more than one piece allocates its request array). `automatic` is resolved
/// once, for the prepared count. `passthrough` calls the vendor allreduce each time.
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "../collectives.hpp"
#include "engine.hpp"

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
    if (!task_) task_ = std::make_shared<task>(this);
    task_->reset();
    task_->send = sendbuf;
    task_->recv = recvbuf;
    detail::engine& e = detail::engine_of(*comm_);
    pending_ = request(e.submit([&] {
      task_->tags = detail::begin_on(*comm_);
      return std::static_pointer_cast<detail::task>(task_);
    }));
    return pending_;
  }
  request& start(T* data) { return start(data, data); }

private:
  struct task final : detail::task {
    explicit task(prepared_allreduce* o) : owner(o) {}
    void run() override {
      C& comm = *owner->comm_;
      detail::throw_if_broken(comm);
      detail::guarded_on(comm, [&] { owner->replay(tags, send, recv); });
    }
    prepared_allreduce* owner;
    detail::collective_tags_t<C> tags{};
    const T* send = nullptr;
    T* recv = nullptr;
  };

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

} // namespace tcoll
