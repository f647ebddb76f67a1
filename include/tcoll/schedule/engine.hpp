#pragma once
/// \file
/// The communication engine: one background thread per transport that runs the transport's
/// queued collectives one after another, while the threads that queued them go on
/// computing (Horovod's background thread, MG-WFBP's communication thread). And `request`,
/// the handle of one queued collective.
///
/// Thread-safety contract:
///  - Queueing (`iallreduce`, ..., the overlap scheduler) may happen from any thread. A
///    collective's message space (tag) is drawn when it is queued, under the engine's lock,
///    so the queue order is the start order. MPI's rule applies to that order: every rank
///    queues (and starts blocking collectives on the same transport) in the same order.
///    Several threads of one rank that queue on one transport must therefore agree on an
///    order among themselves (for example by taking turns on a mutex in a fixed sequence).
///  - A blocking collective called while non-blocking ones are queued draws the next tag
///    and runs concurrently with the engine: the transport is then used by two threads.
///    The in-process transports allow it; MPI needs `MPI_THREAD_MULTIPLE` for any engine
///    (the engine thread calls MPI while the main thread may too), checked when the engine
///    is created.
///  - A `request` is owned by one thread at a time (like `MPI_Request`); `test`, `wait` and
///    `wait_for` are not to be called on one request from two threads at once.
///  - The engine lives in the transport's `collective_context` and stops when the transport
///    is destroyed: a running collective is allowed to finish (it is bounded by the
///    transport timeout), queued ones fail with `aborted_error`.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "../communicator.hpp"
#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../detail/collective_scope.hpp"

namespace tcoll {

namespace detail {

/// One queued collective. `run()` performs it (blocking) on the engine thread.
class task {
public:
  enum class state : int { queued, running, done, failed };
  virtual ~task() = default;
  virtual void run() = 0;

  state status() const {
    std::lock_guard lock(mutex_);
    return state_;
  }
  bool finished() const {
    const state s = status();
    return s == state::done || s == state::failed;
  }
  /// Waits until finished or `until`; true when finished.
  bool wait_until(clock::time_point until) {
    std::unique_lock lock(mutex_);
    return cv_.wait_until(lock, until,
                          [&] { return state_ == state::done || state_ == state::failed; });
  }
  void wait() {
    std::unique_lock lock(mutex_);
    if (runner_ == std::this_thread::get_id() && state_ != state::done && state_ != state::failed)
      throw invalid_argument("a non-blocking collective was waited on from its own engine "
                             "thread (its completion callback); it can never finish there",
                             rank_);
    cv_.wait(lock, [&] { return state_ == state::done || state_ == state::failed; });
  }
  /// Whether the calling thread is the one running this task (its completion included):
  /// waiting for the task there could never end.
  bool running_here() const {
    std::lock_guard lock(mutex_);
    return runner_ == std::this_thread::get_id() && state_ != state::done &&
           state_ != state::failed;
  }
  std::exception_ptr error() const {
    std::lock_guard lock(mutex_);
    return error_;
  }

  /// When the task was queued, started and finished (zero until then).
  struct times {
    clock::time_point queued, started, finished;
  };
  times timestamps() const {
    std::lock_guard lock(mutex_);
    return {queued_at, started_at, finished_at};
  }
  /// Makes a finished (or never queued) task queueable again (reused tasks allocate
  /// nothing per call).
  void reset() {
    std::lock_guard lock(mutex_);
    state_ = state::queued;
    error_ = nullptr;
    runner_ = {};
    queued_at = started_at = finished_at = clock::time_point{};
  }
  void mark_queued() {
    std::lock_guard lock(mutex_);
    queued_at = clock::now();
  }

  /// The engine thread of `rank` has taken the task off its queue (to run it, or to fail
  /// it unstarted); only it may finish the task now.
  void mark_taken(int rank) {
    std::lock_guard lock(mutex_);
    runner_ = std::this_thread::get_id();
    rank_ = rank;
  }
  void mark_running() {
    std::lock_guard lock(mutex_);
    started_at = clock::now();
    state_ = state::running;
  }
  void mark_finished(std::exception_ptr e) {
    on_finished(e); // before waiters wake: whoever waits on the task sees its completion
    {
      std::lock_guard lock(mutex_);
      finished_at = clock::now();
      if (started_at == clock::time_point{}) started_at = finished_at;
      error_ = e;
      state_ = e ? state::failed : state::done;
    }
    cv_.notify_all();
  }

protected:
  /// Runs exactly once per queued run when the task finishes: after `run()` returned or
  /// threw, and also when the task never ran (the engine stopped before it started). For
  /// completions that must happen in every outcome (an MPI generalized request).
  virtual void on_finished(std::exception_ptr) noexcept {}

private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  state state_ = state::queued;
  std::exception_ptr error_;
  clock::time_point queued_at{}, started_at{}, finished_at{};
  std::thread::id runner_{}; ///< the engine thread, once running
  int rank_ = -1;            ///< of the engine's transport, for errors
};

/// The completion of a task that needs none.
struct no_completion {
  void operator()(std::exception_ptr) const noexcept {}
};

/// A task that runs a callable; `done(error)` runs when it finishes, in every outcome
/// (see `task::on_finished`).
template <class F, class Done = no_completion>
class function_task final : public task {
public:
  explicit function_task(F f, Done done = {}) : f_(std::move(f)), done_(std::move(done)) {}
  void run() override { f_(); }

private:
  void on_finished(std::exception_ptr e) noexcept override { done_(e); }
  F f_;
  Done done_;
};

/// The engine of one transport (see the file comment).
class engine final : public collective_context::attachment {
public:
  explicit engine(int rank) : rank_(rank), thread_([this] { loop(); }) {}
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  ~engine() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  /// Queues a collective: `prepare()` runs under the engine's lock (it checks the arguments
  /// and draws the message space, so queue order is tag order) and returns the task.
  template <class Prepare>
  std::shared_ptr<task> submit(Prepare&& prepare) {
    std::shared_ptr<task> t;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) throw aborted_error("collective queued on a transport being destroyed", rank_);
      t = prepare();
      t->mark_queued();
      queue_.push_back(t);
    }
    cv_.notify_one();
    return t;
  }

  /// Collectives queued and not yet started.
  std::size_t queued() const {
    std::lock_guard lock(mutex_);
    return queue_.size();
  }

  /// Whether no collective is queued or running.
  bool idle() const {
    std::lock_guard lock(mutex_);
    return queue_.empty() && !running_;
  }

  /// Waits until every collective queued so far has finished (MPI_Comm_free lets pending
  /// operations complete). Each collective bounds its own waits; this gives up after
  /// `no_progress` without one finishing. True when the engine is idle.
  bool wait_idle(std::chrono::milliseconds no_progress) {
    std::unique_lock lock(mutex_);
    std::uint64_t seen = finished_;
    auto until = clock::now() + no_progress;
    while (!queue_.empty() || running_) {
      const bool timed_out = idle_cv_.wait_until(lock, until) == std::cv_status::timeout;
      if (finished_ != seen) {
        seen = finished_;
        until = clock::now() + no_progress;
      } else if (timed_out) {
        return false;
      }
    }
    return true;
  }

  /// Whether the calling thread is this engine's: code that runs inside a collective's
  /// completion (a callback chained on it) runs there, while the engine waits for it.
  bool on_engine_thread() const noexcept { return std::this_thread::get_id() == thread_id_.load(); }
  bool runs_on_calling_thread() const noexcept override { return on_engine_thread(); }

  /// From the engine thread only (a completion callback): runs every queued collective
  /// here, in queue order, before returning. A callback that waits for a collective queued
  /// after the one it completes would otherwise wait for its own thread forever; running
  /// the queue here keeps the call order, so the peers match it.
  void run_queued_here() {
    if (!on_engine_thread())
      throw invalid_argument("engine::run_queued_here called off the engine thread", rank_);
    for (;;) {
      std::shared_ptr<task> t;
      {
        std::lock_guard lock(mutex_);
        if (queue_.empty()) return;
        t = std::move(queue_.front());
        queue_.pop_front();
        t->mark_taken(rank_);
      }
      execute(*t);
      std::lock_guard lock(mutex_);
      ++finished_;
    }
  }

private:
  void loop() {
    thread_id_ = std::this_thread::get_id();
    for (;;) {
      std::shared_ptr<task> t;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return; // stopping, nothing left
        t = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
        t->mark_taken(rank_);
        if (stopping_) {
          lock.unlock();
          t->mark_finished(std::make_exception_ptr(aborted_error(
              "the transport was destroyed before this queued collective started", rank_)));
          finish_one();
          continue;
        }
      }
      execute(*t);
      finish_one();
    }
  }
  static void execute(task& t) {
    t.mark_running();
    std::exception_ptr error;
    try {
      t.run();
    } catch (...) {
      error = std::current_exception();
    }
    t.mark_finished(error);
  }
  void finish_one() {
    {
      std::lock_guard lock(mutex_);
      running_ = false;
      ++finished_;
    }
    idle_cv_.notify_all();
  }

  int rank_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_; ///< a collective finished (wait_idle)
  std::deque<std::shared_ptr<task>> queue_;
  bool stopping_ = false;
  bool running_ = false;       ///< a collective has been taken off the queue and not finished
  std::uint64_t finished_ = 0; ///< collectives finished so far
  std::atomic<std::thread::id> thread_id_{}; ///< set by the thread itself, first thing
  std::thread thread_;                       // last: starts after the rest is built
};

/// The engine of communicator `comm`, started on first use: its `engine_transport()`'s (the
/// transport itself, or the one a composed machine names). When it starts, every transport
/// `comm` uses must allow being driven from its thread (`check_concurrent_use()`, e.g.
/// MPI's thread level); no engine starts on the others.
template <communicator C>
engine& engine_of(C& comm) {
  auto& t = engine_transport(comm);
  static_assert(has_collective_context<std::remove_cvref_t<decltype(t)>>,
                "tcoll: non-blocking collectives need a transport with a collective_context "
                "(every tcoll transport has one; a user transport adds `collectives()`)");
  collective_context& c = t.collectives();
  if (auto* a = dynamic_cast<engine*>(c.attached())) return *a;
  for_each_transport(comm, [](auto& x) {
    if constexpr (requires { x.check_concurrent_use(); }) x.check_concurrent_use();
  });
  const int rank = t.rank();
  return c.template attach<engine>([rank] { return std::make_unique<engine>(rank); });
}

/// The engine of `comm` (a transport or a composed communicator) if one was started.
template <class C>
engine* started_engine(C& comm) {
  return dynamic_cast<engine*>(engine_transport(comm).collectives().attached());
}

/// Whether the calling thread is the engine thread of `comm` (see engine::on_engine_thread).
template <class C>
bool on_engine_thread(C& comm) {
  engine* e = started_engine(comm);
  return e && e->on_engine_thread();
}

/// Whether nothing is queued or running on the engine of `comm` (a transport or a composed
/// communicator); true when it has none. Starts no engine. A blocking collective started
/// while this holds cannot overtake a queued one on the same buffers.
template <class C>
bool engine_idle(C& comm) {
  engine* e = started_engine(comm);
  return !e || e->idle();
}

/// One collective on communicator `C` as a task of the engine: `body(tags)` runs in the
/// message spaces drawn when it was queued, after a check that `C` is not broken, under
/// `guarded_on` (a failure breaks every transport of `C`); `done(error)` runs when it
/// finishes, in every outcome. The one task every queued collective is (a call of the
/// non-blocking entry points, a prepared collective, a scheduler's bucket); the reusable
/// ones are queued again with `submit_task`.
template <class C, class Body, class Done = no_completion>
class collective_task final : public task {
public:
  collective_task(C& comm, Body body, Done done = {})
      : comm_(&comm), body_(std::move(body)), done_(std::move(done)) {}
  void run() override {
    throw_if_broken(*comm_);
    guarded_on(*comm_, [&] { body_(tags_); });
  }
  /// Draws the message spaces of the next run (under the engine's lock: `submit_task`).
  void draw_tags() { tags_ = begin_on(*comm_); }
  /// The body, for its owner to update between runs or to run it here with tags of its own.
  Body& body() noexcept { return body_; }

private:
  void on_finished(std::exception_ptr e) noexcept override { done_(e); }
  C* comm_;
  Body body_;
  Done done_;
  collective_tags_t<C> tags_{};
};

/// Queues `body(tags)` on the engine of communicator `comm`: draws the message spaces at
/// once (throwing if `comm` is broken), so calls start in queue order on every transport
/// of `comm`; on the engine thread it checks `comm` again and runs the body under
/// `guarded_on` (a failure breaks every transport of `comm`). A collective whose
/// communicator broke while it was queued throws without communicating (naming the cause).
/// `done(error)` runs on the engine thread once the collective has finished, in every
/// outcome after it was queued (succeeded, failed, skipped because the communicator broke
/// or was destroyed), before the request completes.
template <communicator C, class Body, class Done = no_completion>
std::shared_ptr<task> submit_collective(C& comm, Body body, Done done = {}) {
  engine& e = engine_of(comm);
  return e.submit([&] {
    auto t =
        std::make_shared<collective_task<C, Body, Done>>(comm, std::move(body), std::move(done));
    t->draw_tags();
    return t;
  });
}

/// Queues the reusable collective task `t` again on engine `e` (the engine of its
/// communicator): made queueable, its message spaces drawn under the engine's lock like
/// every other collective's. Nothing is allocated. The caller makes sure the previous run
/// has finished.
template <class C, class Body, class Done>
std::shared_ptr<task> submit_task(engine& e,
                                  const std::shared_ptr<collective_task<C, Body, Done>>& t) {
  t->reset();
  return e.submit([&] {
    t->draw_tags();
    return std::static_pointer_cast<task>(t);
  });
}

} // namespace detail

/// Handle of a non-blocking collective (`iallreduce`, ...). Move-only. The buffers of the
/// call must stay valid, and unread, until it completes. Destroying an unfinished request
/// waits for it (bounded: the collective fails at the transport's timeout), so no request
/// ever leaks or touches freed memory; errors surface from `test`/`wait`, not from the
/// destructor.
class request {
public:
  request() = default;
  explicit request(std::shared_ptr<detail::task> t) : task_(std::move(t)) {}
  request(request&&) noexcept = default;
  request& operator=(request&& o) noexcept {
    if (this != &o) {
      settle();
      task_ = std::move(o.task_);
    }
    return *this;
  }
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  ~request() { settle(); }

  /// True when the collective has completed; rethrows its error if it failed.
  bool test() {
    if (!task_) return true;
    if (!task_->finished()) return false;
    rethrow();
    return true;
  }
  /// Blocks until the collective completes; rethrows its error.
  void wait() {
    if (!task_) return;
    task_->wait();
    rethrow();
  }
  /// Waits at most `d`; true when complete (rethrows its error), false on time-out (the
  /// collective goes on).
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) {
    if (!task_) return true;
    if (!task_->wait_until(clock::now() + std::chrono::duration_cast<clock::duration>(d)))
      return false;
    rethrow();
    return true;
  }
  /// False for a default-constructed or moved-from request.
  bool valid() const noexcept { return task_ != nullptr; }
  /// When the collective was queued, started on the engine, and finished (zero until then).
  detail::task::times timestamps() const {
    return task_ ? task_->timestamps() : detail::task::times{};
  }

private:
  void rethrow() {
    if (auto e = task_->error()) std::rethrow_exception(e);
  }
  /// Waits for the task, except where that could never end: destroyed by the completion
  /// callback of its own collective on the engine thread, where the collective has run
  /// and the engine keeps the task alive until it is marked finished.
  void settle() noexcept {
    if (task_ && !task_->running_here()) task_->wait();
  }
  std::shared_ptr<detail::task> task_;
};

} // namespace tcoll
