#pragma once
// `c10d_transport`: a tcoll transport whose messages travel over the point-to-point calls
// (`send`/`recv`) of a PyTorch process group, here Gloo's. The backend uses it across nodes,
// where no memory is shared: every rank of the group as the flat transport of the
// collectives other than allreduce, and the ranks of one local index across nodes as the
// inter-node level of `hierarchical<shm_transport, c10d_transport>`.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <tcoll/core/collective_context.hpp>
#include <tcoll/core/concepts.hpp>
#include <tcoll/core/error.hpp>

namespace tcoll_torch {

/// See the file comment. Not copyable; the process group must outlive it.
class c10d_transport {
public:
  static constexpr bool zero_copy = false;
  static constexpr std::string_view name = "c10d";

  /// A pending send or receive (a c10d Work); a consuming receive calls its consumer on
  /// completion, from the staging buffer.
  class request {
  public:
    request() = default;
    request(request&& o) noexcept { *this = std::move(o); }
    /// Withdraws this request's own unfinished transfer first, as the destructor does.
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        withdraw();
        work_ = std::move(o.work_);
        owner_ = std::exchange(o.owner_, nullptr);
        use_ = o.use_;
        staging_ = o.staging_;
        bytes_ = o.bytes_;
        peer_ = o.peer_;
        send_ = o.send_;
        done_ = std::exchange(o.done_, false);
      }
      return *this;
    }
    /// An unfinished transfer is aborted (a failed collective's buffers are about to go: a
    /// late receive must not write into them).
    ~request() { withdraw(); }

  private:
    friend class c10d_transport;
    void withdraw() noexcept {
      if (work_ && !done_) {
        try {
          if (!work_->isCompleted()) work_->abort();
        } catch (...) {
        }
        owner_->forget(work_);
      }
      work_.reset();
    }
    c10::intrusive_ptr<c10d::Work> work_;
    c10d_transport* owner_ = nullptr;
    tcoll::consumer use_{};
    const void* staging_ = nullptr;
    std::size_t bytes_ = 0;
    int peer_ = -1;
    bool send_ = false;
    bool done_ = false;
  };

  c10d_transport(c10::intrusive_ptr<c10d::Backend> group, std::chrono::milliseconds timeout)
      : group_(std::move(group)), rank_(group_->getRank()), size_(group_->getSize()),
        timeout_(timeout) {}
  c10d_transport(const c10d_transport&) = delete;
  c10d_transport& operator=(const c10d_transport&) = delete;
  ~c10d_transport() { context_.detach(); }

  tcoll::collective_context& collectives() noexcept { return context_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    check_peer(peer, "isend");
    request r;
    r.peer_ = peer;
    r.send_ = true;
    r.bytes_ = bytes;
    std::vector<at::Tensor> t{wrap(const_cast<void*>(data), bytes)};
    r.work_ = call(peer, "send", [&] { return group_->send(t, peer, tag); });
    track(r);
    return r;
  }
  request irecv(int peer, void* data, std::size_t bytes, int tag) {
    check_peer(peer, "irecv");
    request r;
    r.peer_ = peer;
    r.bytes_ = bytes;
    std::vector<at::Tensor> t{wrap(data, bytes)};
    r.work_ = call(peer, "recv", [&] { return group_->recv(t, peer, tag); });
    track(r);
    return r;
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, tcoll::consumer use, void* staging) {
    if (bytes != 0 && staging == nullptr)
      throw tcoll::invalid_argument("irecv_consume: staging is null but bytes is " +
                                        std::to_string(bytes) +
                                        " (c10d_transport is not zero-copy)",
                                    rank_, peer);
    request r = irecv(peer, staging, bytes, tag);
    r.use_ = use;
    r.staging_ = staging;
    return r;
  }

  /// True when `r` completed (its consumer, if any, has run); rethrows its failure.
  bool test(request& r) {
    if (r.done_) return true;
    check_aborted(r);
    if (!r.work_->isCompleted()) return false;
    settle(r);
    return true;
  }
  /// Blocks until `r` completes; throws `timeout_error` at `when`.
  void wait(request& r, tcoll::deadline when) {
    while (!test(r)) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(when - tcoll::clock::now());
      if (left.count() <= 0) throw timeout(r);
      // One wait up to the deadline, never in slices: Gloo fails a send or receive whose
      // wait times out (a slower peer would fail the transfer). abort() aborts the pending
      // works, which wakes this wait.
      try {
        r.work_->wait(std::max(left, std::chrono::milliseconds(1)));
      } catch (...) {
        if (r.work_->isCompleted()) break; // failed or aborted: test() throws below
      }
    }
    test(r);
  }
  /// Fails every pending and later transfer (a failure elsewhere in the collective): the
  /// pending works are aborted, so waits on them return now.
  void abort() noexcept {
    aborted_.store(true);
    std::lock_guard lock(pending_mutex_);
    for (auto& w : pending_) try {
        w->abort();
      } catch (...) {
      }
  }

private:
  static at::Tensor wrap(void* data, std::size_t bytes) {
    static unsigned char empty = 0; // a zero-byte message still travels (sizes match up)
    return at::from_blob(bytes ? data : &empty, {static_cast<std::int64_t>(bytes)},
                         at::TensorOptions().dtype(at::kByte));
  }
  template <class F>
  c10::intrusive_ptr<c10d::Work> call(int peer, const char* what, F&& f) {
    try {
      return f();
    } catch (const std::exception& e) {
      throw tcoll::transport_error(std::string("c10d_transport: ") + what + " failed: " + e.what(),
                                   rank_, peer);
    }
  }
  void track(request& r) {
    r.owner_ = this;
    std::lock_guard lock(pending_mutex_);
    pending_.push_back(r.work_);
  }
  void forget(const c10::intrusive_ptr<c10d::Work>& w) noexcept {
    std::lock_guard lock(pending_mutex_);
    const auto it = std::find(pending_.begin(), pending_.end(), w);
    if (it != pending_.end()) {
      *it = std::move(pending_.back());
      pending_.pop_back();
    }
  }
  void settle(request& r) {
    r.done_ = true;
    forget(r.work_);
    if (!r.work_->isSuccess()) {
      std::string why = "unknown error";
      try {
        std::rethrow_exception(r.work_->exception());
      } catch (const std::exception& e) {
        why = e.what();
      } catch (...) {
      }
      throw tcoll::transport_error(std::string("c10d_transport: ") +
                                       (r.send_ ? "send" : "receive") + " of " +
                                       std::to_string(r.bytes_) + " bytes failed: " + why,
                                   rank_, r.peer_);
    }
    if (r.use_.fn && r.bytes_) r.use_(r.staging_, r.bytes_);
  }
  void check_aborted(const request& r) const {
    if (aborted_.load(std::memory_order_relaxed))
      throw tcoll::aborted_error("c10d_transport: operation aborted", rank_, r.peer_);
  }
  tcoll::timeout_error timeout(const request& r) const {
    return tcoll::timeout_error(std::string(r.send_ ? "send" : "receive") + " of " +
                                    std::to_string(r.bytes_) +
                                    " bytes over the process group "
                                    "timed out after " +
                                    std::to_string(timeout_.count()) + " ms",
                                rank_, r.peer_);
  }
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw tcoll::invalid_argument(std::string("c10d_transport: ") + what + ": peer " +
                                        std::to_string(peer) + " is not another rank of " +
                                        std::to_string(size_),
                                    rank_);
  }

  c10::intrusive_ptr<c10d::Backend> group_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
  std::mutex pending_mutex_;
  std::vector<c10::intrusive_ptr<c10d::Work>> pending_; ///< unfinished transfers (abort())
  tcoll::collective_context context_;                   // last: destroyed first
};

static_assert(tcoll::check_transport<c10d_transport>());

} // namespace tcoll_torch
