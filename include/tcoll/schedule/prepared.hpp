#pragma once
/// \file
/// Prepared (persistent) allreduce, in the manner of `MPI_Allreduce_init` and Gloo's
/// algorithm objects: built once for (transport, count, type, op, algorithm, in-place or
/// not), it records the algorithm's steps and owns the scratch and staging space they need,
/// so a repeated call allocates nothing (the transport's own requests aside: an MPI message
/// split into more than one piece allocates its request array). `automatic` is resolved
/// once, for the prepared count. `passthrough` calls the vendor allreduce each time.
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
    visit_algorithm<can>(algo.template choose_for<Tr>(count * sizeof(T), ranks, can.commutative,
                                                      can.native),
                         algo, f);
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
  executor<Tr, R, T, Op> ex(t, red, op, sendbuf, rec.count, recvbuf, rec.count, tag);
  ex.use_workspace(scratch, scratch_count, staging, staging_count);
  ex.reserve(rec.steps.scratch_count, rec.steps.staging_count);
  for (const auto& round : rec.steps.rounds) {
    ex.round_begin();
    for (const step& s : round) ex.add(s);
    ex.round_end();
  }
}

} // namespace detail

/// A prepared allreduce (see the file comment). Not thread-safe: one call (or one started
/// request) at a time; `start` while a previous start is unfinished waits for it first.
template <transport Tr, class T, class Op = sum_op, class Algo = automatic, reducer R = cpu_reducer>
class prepared_allreduce {
public:
  /// Prepares an allreduce of `count` elements; `in_place` says whether calls pass
  /// `sendbuf == recvbuf`.
  prepared_allreduce(Tr& t, std::size_t count, bool in_place = true, const Op& op = {},
                     const Algo& algo = {}, R red = {})
      : t_(&t), op_(op), red_(std::move(red)) {
    detail::check_support<R, Op, T>();
    detail::check_count(count, 1, sizeof(T), "prepared_allreduce", t.rank());
    rec_ = detail::record_allreduce<Tr, T, Op>(t, count, in_place, algo);
    scratch_ = red_.template allocate<T>(rec_.steps.scratch_count);
    if constexpr (!transport_is_zero_copy<Tr>())
      staging_ = red_.template allocate<T>(rec_.steps.staging_count);
  }
  prepared_allreduce(const prepared_allreduce&) = delete;
  prepared_allreduce& operator=(const prepared_allreduce&) = delete;
  ~prepared_allreduce() { pending_ = request(); } // wait for a started call

  std::size_t count() const noexcept { return rec_.count; }
  bool in_place() const noexcept { return rec_.in_place; }
  /// Scratch plus staging elements owned (what a call would otherwise allocate).
  std::size_t workspace_elements() const noexcept {
    return rec_.steps.scratch_count + (transport_is_zero_copy<Tr>() ? 0 : rec_.steps.staging_count);
  }

  /// Blocking call: the allreduce of `count()` elements from `sendbuf` into `recvbuf`.
  void run(const T* sendbuf, T* recvbuf) {
    check(sendbuf, recvbuf);
    pending_ = request(); // a started call goes first (its tag was drawn first)
    const int tag = detail::begin_collective(*t_);
    detail::guarded(*t_, [&] { replay(tag, sendbuf, recvbuf); });
  }
  /// In-place blocking call.
  void run(T* data) { run(data, data); }

  /// Non-blocking call on the transport's engine; the returned request is also kept, so
  /// the next call waits for it. The task object is reused: nothing is allocated after
  /// the first start.
  request& start(const T* sendbuf, T* recvbuf) {
    check(sendbuf, recvbuf);
    pending_ = request();
    if (!task_) task_ = std::make_shared<task>(this);
    task_->reset();
    task_->send = sendbuf;
    task_->recv = recvbuf;
    detail::engine& e = detail::engine_of(*t_);
    pending_ = request(e.submit([&] {
      task_->tag = detail::begin_collective(*t_);
      return std::static_pointer_cast<detail::task>(task_);
    }));
    return pending_;
  }
  request& start(T* data) { return start(data, data); }

private:
  struct task final : detail::task {
    explicit task(prepared_allreduce* o) : owner(o) {}
    void run() override {
      Tr& t = *owner->t_;
      if (collective_context* c = detail::context_of(t)) c->throw_if_broken(t.rank());
      detail::guarded(t, [&] { owner->replay(tag, send, recv); });
    }
    prepared_allreduce* owner;
    int tag = 0;
    const T* send = nullptr;
    T* recv = nullptr;
  };

  void check(const T* sendbuf, T* recvbuf) const {
    const int rank = t_->rank();
    detail::check_allreduce_args(sendbuf, recvbuf, rec_.count, rank);
    if (rec_.count && (sendbuf == recvbuf) != rec_.in_place)
      throw invalid_argument(std::string("prepared_allreduce: prepared ") +
                                 (rec_.in_place ? "in place" : "out of place") + " but called " +
                                 (rec_.in_place ? "out of place" : "in place"),
                             rank);
  }
  void replay(int tag, const T* sendbuf, T* recvbuf) {
    detail::replay_allreduce(*t_, tag, rec_, sendbuf, recvbuf, op_, red_, scratch_.data(),
                             rec_.steps.scratch_count, staging_.data(),
                             transport_is_zero_copy<Tr>() ? 0 : rec_.steps.staging_count);
  }

  Tr* t_;
  Op op_;
  R red_;
  detail::recorded_allreduce rec_;
  typename R::template buffer<T> scratch_{};
  typename R::template buffer<T> staging_{};
  std::shared_ptr<task> task_;
  request pending_;
};

} // namespace tcoll
