#pragma once
// The `c10d::Work` objects of the tcoll backend (backend.hpp) and what drives them: `work`,
// the Work of a collective and its future (completed by the engine thread or by the
// caller's); `p2p_work` and `any_source_work`, a posted send or receive that completes
// while it is tested or waited on; `coalesced_work`, the one Work over a coalesced batch;
// and `p2p_progress`, the thread that drives posted transfers nobody waits on.
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <tcoll/core/concepts.hpp>
#include <tcoll/core/error.hpp>

#include "flight_recorder.hpp"

namespace tcoll_torch {

using c10d::OpType;

/// The Work of one call: completed by the engine thread or, for a small call, by the
/// caller's (`complete`). Its future carries the output tensors; it is made on the first
/// `getFuture()` (most calls are only waited), completed at once if the work already is.
class work final : public c10d::Work {
public:
  work(int rank, OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), outputs_(std::move(outputs)) {}

  std::vector<at::Tensor> result() override { return outputs_; }

  /// Its entry in torch's Flight Recorder, retired when it succeeds.
  void set_trace(trace_entry e) { trace_ = std::move(e); }
  /// Now is when it starts to run (the engine may hold it behind earlier calls).
  void started() noexcept { trace_.started(); }

  /// `drain()` runs the engine's queue in the calling thread when that is the engine's own
  /// (a callback chained on an earlier call), so a wait there cannot wait for itself.
  void set_drain(std::function<void()> drain) { drain_ = std::move(drain); }
  bool wait(std::chrono::milliseconds timeout) override {
    if (drain_ && !isCompleted()) drain_();
    return c10d::Work::wait(timeout);
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    if (drain_ && !isCompleted()) drain_(); // the future may be waited on next
    std::unique_lock lock(future_mutex_);
    if (!future_) {
      static const c10::TypePtr list_of_tensors = c10::ListType::create(c10::TensorType::get());
      future_ = c10::make_intrusive<c10::ivalue::Future>(list_of_tensors);
      if (settled_) {
        lock.unlock();
        settle_future(future_);
      }
    }
    return future_;
  }

  /// Marks the call finished (`error` null: succeeded); wakes wait() and runs the future's
  /// callbacks on this thread.
  void complete(std::exception_ptr error) {
    trace_.retire(!error); // before waiters wake: a dump after wait() reads it completed
    finish(error);
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard lock(future_mutex_);
      settled_ = true;
      future = future_;
    }
    if (future) settle_future(future);
  }

private:
  void settle_future(const c10::intrusive_ptr<c10::ivalue::Future>& future) {
    if (exception_)
      future->setError(exception_);
    else
      future->markCompleted(c10::IValue(outputs_));
  }
  std::vector<at::Tensor> outputs_;
  trace_entry trace_;
  std::function<void()> drain_;
  std::mutex future_mutex_;
  bool settled_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/// A point-to-point send or receive: posted at once, driven to completion by wait() or
/// isCompleted() (the transport progresses a transfer when its owner tests or waits).
template <class Tr>
class p2p_work final : public c10d::Work {
public:
  p2p_work(int rank, OpType type, Tr& t, typename Tr::request r, at::Tensor tensor, at::Tensor user,
           int peer)
      : c10d::Work(rank, type), t_(t), request_(std::move(r)), tensor_(std::move(tensor)),
        user_(std::move(user)), peer_(peer) {}

  bool isCompleted() override {
    std::lock_guard lock(progress_);
    return drive();
  }
  /// isCompleted() for the progress thread: skips the test while a waiter drives the
  /// transfer (it holds the lock for as long as it waits).
  bool poll() {
    std::unique_lock lock(progress_, std::try_to_lock);
    return lock ? drive() : false;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    {
      std::lock_guard lock(progress_);
      if (!completed_) try {
          const auto limit = timeout == kNoTimeout ? t_.timeout() : std::min(timeout, t_.timeout());
          t_.wait(request_, tcoll::clock::now() + limit);
          settle(nullptr);
        } catch (...) {
          settle(std::current_exception());
        }
    }
    return c10d::Work::wait(timeout);
  }
  int sourceRank() const override { return peer_; }
  std::vector<at::Tensor> result() override { return {user_}; }
  /// Its entry in torch's Flight Recorder, retired when it succeeds.
  void set_trace(trace_entry e) { trace_ = std::move(e); }

private:
  bool drive() {
    if (!completed_) try {
        if (t_.test(request_)) settle(nullptr);
      } catch (...) {
        settle(std::current_exception());
      }
    return completed_;
  }
  void settle(std::exception_ptr error) {
    if (!error && user_.defined() && !user_.is_same(tensor_)) user_.copy_(tensor_);
    trace_.retire(!error);
    finish(error);
  }
  std::mutex progress_;
  trace_entry trace_;
  Tr& t_;
  typename Tr::request request_;
  at::Tensor tensor_, user_;
  int peer_;
};

/// The order of a group's receives from any source: per tag, the tickets of those not yet
/// matched. Only the oldest of a tag may take a message, so receives of one tag without a
/// source match in the order they were posted (MPI's rule), whichever thread drives them.
class any_source_order {
public:
  std::uint64_t enter(int tag) {
    std::lock_guard lock(mutex_);
    pending_[tag].insert(++last_);
    return last_;
  }
  bool first(int tag, std::uint64_t ticket) {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(tag);
    return it != pending_.end() && *it->second.begin() == ticket;
  }
  void leave(int tag, std::uint64_t ticket) {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(tag);
    if (it == pending_.end()) return;
    it->second.erase(ticket);
    if (it->second.empty()) pending_.erase(it);
  }

private:
  std::mutex mutex_;
  std::uint64_t last_ = 0;
  std::map<int, std::set<std::uint64_t>> pending_;
};

/// A receive from any source (`recv`/`irecv` without `src`): while unmatched it probes the
/// peers in turn (rank + 1, rank + 2, ... mod size) and posts an ordinary receive to the
/// first that has a message of its tag waiting; `sourceRank()` names that peer.
/// Unmatched, it has no deadline until it is waited on (an `irecv` may be posted long before
/// its sender sends); `wait` gives matching and receiving the group's timeout together.
template <class Tr>
class any_source_work final : public c10d::Work {
public:
  any_source_work(int rank, int size, Tr& t, int tag, at::Tensor tensor, at::Tensor user,
                  std::shared_ptr<any_source_order> order)
      : c10d::Work(rank, OpType::RECVANYSOURCE), rank_(rank), size_(size), t_(t), tag_(tag),
        tensor_(std::move(tensor)), user_(std::move(user)), order_(std::move(order)),
        ticket_(order_->enter(tag)) {}
  ~any_source_work() override { leave_order(); }

  bool isCompleted() override {
    std::lock_guard lock(progress_);
    return drive();
  }
  /// isCompleted() for the progress thread (see p2p_work::poll).
  bool poll() {
    std::unique_lock lock(progress_, std::try_to_lock);
    return lock ? drive() : false;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    {
      std::lock_guard lock(progress_);
      const auto limit = timeout == kNoTimeout ? t_.timeout() : std::min(timeout, t_.timeout());
      const auto until = tcoll::clock::now() + limit;
      while (!drive() && !request_) {
        if (tcoll::clock::now() >= until) {
          settle(std::make_exception_ptr(tcoll::timeout_error(
              "recv from any source (tag " + std::to_string(tag_) + ", " +
                  std::to_string(tensor_.nbytes()) + " bytes): no peer sent a message within " +
                  std::to_string(limit.count()) + " ms",
              rank_)));
          break;
        }
        std::this_thread::yield();
      }
      if (!completed_) try {
          t_.wait(*request_, until);
          settle(nullptr);
        } catch (...) {
          settle(std::current_exception());
        }
    }
    return c10d::Work::wait(timeout);
  }
  /// The peer the message came from; -1 while none has been matched.
  int sourceRank() const override { return source_.load(std::memory_order_acquire); }
  std::vector<at::Tensor> result() override { return {user_}; }
  /// Its entry in torch's Flight Recorder, retired when it succeeds.
  void set_trace(trace_entry e) { trace_ = std::move(e); }

private:
  bool drive() {
    if (!completed_) try {
        if (!request_ && !match()) return false;
        if (t_.test(*request_)) settle(nullptr);
      } catch (...) {
        settle(std::current_exception());
      }
    return completed_;
  }
  bool match() {
    if (!order_->first(tag_, ticket_)) return false;
    for (int k = 1; k < size_; ++k) {
      const int q = (rank_ + k) % size_;
      if (!t_.probe(q, tag_)) continue;
      request_.emplace(t_.irecv(q, tensor_.data_ptr(), tensor_.nbytes(), tag_));
      source_.store(q, std::memory_order_release);
      leave_order();
      return true;
    }
    return false;
  }
  void leave_order() {
    if (in_order_) order_->leave(tag_, ticket_);
    in_order_ = false;
  }
  void settle(std::exception_ptr error) {
    leave_order();
    if (!error && user_.defined() && !user_.is_same(tensor_)) user_.copy_(tensor_);
    trace_.retire(!error);
    finish(error);
  }
  std::mutex progress_;
  int rank_, size_;
  Tr& t_;
  int tag_;
  at::Tensor tensor_, user_;
  std::shared_ptr<any_source_order> order_;
  std::uint64_t ticket_;
  bool in_order_ = true;
  std::optional<typename Tr::request> request_;
  std::atomic<int> source_{-1};
  trace_entry trace_;
};

/// What `endCoalescing` returns: the works of every call made since `startCoalescing`, in
/// call order (each call ran or was posted when it was made: coalescing here groups the
/// waiting, which is what `batch_isend_irecv` and `_coalescing_manager` need).
class coalesced_work final : public c10d::Work {
public:
  coalesced_work(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works)
      : c10d::Work(rank, OpType::COALESCED), works_(std::move(works)) {}

  bool isCompleted() override {
    return std::all_of(works_.begin(), works_.end(), [](auto& w) { return w->isCompleted(); });
  }
  /// Waits for every work, then rethrows the first failure.
  bool wait(std::chrono::milliseconds timeout) override {
    std::exception_ptr first;
    for (auto& w : works_) try {
        w->wait(timeout);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    if (first) std::rethrow_exception(first);
    return true;
  }
  std::vector<at::Tensor> result() override {
    std::vector<at::Tensor> all;
    for (auto& w : works_)
      for (auto& t : w->result()) all.push_back(t);
    return all;
  }

private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

/// Drives posted sends and receives to completion in the background, as Gloo's threads do:
/// a transfer on shared memory moves only while someone tests or waits for it, and the
/// rank that posted it may block elsewhere next (in another group's collective, say) while
/// its peer waits for the data. One thread per group; it polls the works it holds (with a
/// backoff up to 1 ms while none moves) and sleeps while it holds none. Each work is held
/// until it completes, so an `isend` whose work is dropped still completes.
class p2p_progress {
public:
  p2p_progress() : thread_([this] { loop(); }) {}
  ~p2p_progress() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  p2p_progress(const p2p_progress&) = delete;
  p2p_progress& operator=(const p2p_progress&) = delete;

  /// `poll()` drives the transfer of `w` and says whether it is complete.
  void add(c10::intrusive_ptr<c10d::Work> w, std::function<bool()> poll) {
    {
      std::lock_guard lock(mutex_);
      works_.push_back({std::move(w), std::move(poll)});
    }
    cv_.notify_one();
  }

private:
  void loop() {
    auto pause = std::chrono::microseconds(20);
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !works_.empty(); });
      if (stopping_) return;
      // (only this thread erases, and `add` appends: the first entries stay `held`'s)
      const auto held = works_;
      lock.unlock();
      std::vector<char> complete(held.size());
      std::size_t done = 0;
      for (std::size_t i = 0; i < held.size(); ++i)
        done += complete[i] = held[i].poll(); // drives the transfer; a failure completes it
      lock.lock();
      std::size_t i = 0;
      std::erase_if(works_, [&](const entry&) { return i < complete.size() && complete[i++]; });
      if (works_.empty()) continue;
      pause = done ? std::chrono::microseconds(20)
                   : std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
      cv_.wait_for(lock, pause, [&] { return stopping_; });
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  struct entry {
    c10::intrusive_ptr<c10d::Work> work; ///< kept alive until complete
    std::function<bool()> poll;
  };
  std::vector<entry> works_;
  bool stopping_ = false;
  std::thread thread_; // last: starts after the rest is built
};

} // namespace tcoll_torch
