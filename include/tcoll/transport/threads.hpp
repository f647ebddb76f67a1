#pragma once
/// \file
/// `threads`: N ranks as threads of one process. Two paths, chosen by the sender by size:
///  - Eager (at most `thread_options::eager_bytes`): the sender copies the message into a
///    free *lane* of the pair (a few cache lines: message number, tag, size, data; claimed
///    with one compare-and-swap, no lock, no allocation) and its send completes at once;
///    the receiver reduces straight from the lane and frees it. One cache-line transfer
///    from sender to receiver is the whole latency of a small message.
///  - Zero copy (longer, or when every lane of the pair is busy): a send posts a
///    descriptor of the sender's own memory; the receiver copies or reduces straight from
///    it (no staging) and then releases the sender.
/// Every send of a pair gets the pair's next message number, and a receive takes the
/// lowest-numbered message of that tag on either path, so messages between one pair with
/// the same tag match in posting order. Every wait has a deadline; a failing rank aborts
/// the team so the others throw `aborted_error` instead of hanging.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "detail/rendezvous.hpp"

namespace tcoll {

/// Tuning knobs of `thread_team`.
struct thread_options {
  /// Longest any blocking wait may take before it throws `timeout_error`.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  /// Messages of at most this many bytes go eagerly through a lane of the pair (see the file
  /// comment); longer ones go zero copy. 0 sends everything zero copy. At most 64 KiB.
  /// The default is where the two paths cost the same on the development VM (an allreduce
  /// of 1-2 KiB at 2 threads takes about 0.55 us either way; docs/benchmarks.md).
  std::size_t eager_bytes = 1024;
  /// Eager messages in flight at once from one rank to another; a send that finds every
  /// lane of its pair busy goes zero copy instead (it never waits). Memory: `eager_lanes`
  /// lanes of `eager_bytes` + 16 bytes (rounded up to 64) for each pair of ranks that
  /// exchanged an eager message (about 4 KiB per pair by default).
  std::size_t eager_lanes = 4;
};

namespace detail::threads {

inline constexpr std::size_t cache_line = 64;
inline constexpr std::size_t max_eager_bytes = 64 * 1024;

/// A posted zero-copy send: the sender's memory, owned by the sender's request until `done`.
struct send_slot : posted_send {
  std::uint64_t number = 0; ///< the pair's message number (posting order)
};

/// The header of an eager lane; the message's bytes follow it in the same lane.
/// `message`: 0 free, `writing` while a sender fills it, the pair's message number once
/// published, that number with `taken_bit` while a receiver drains it.
struct eager_lane {
  static constexpr std::uint64_t writing = ~std::uint64_t{0};
  static constexpr std::uint64_t taken_bit = std::uint64_t{1} << 63;
  std::atomic<std::uint64_t> message{0};
  std::atomic<std::int32_t> tag{0};
  std::atomic<std::uint32_t> bytes{0};
};
static_assert(sizeof(eager_lane) == 16);

/// A counter on a cache line of its own (written by one side of a pair, polled by the other).
struct alignas(cache_line) padded_counter {
  std::atomic<std::uint64_t> value{0};
};

using mailbox = detail::mailbox<send_slot>;

/// The eager lanes of every pair, each pair's `lanes` lanes of `stride` bytes (header, then
/// data) in a cache-line-aligned block made by the pair's first eager send, so a team
/// spends lane memory only on the pairs its algorithms use (a ring: two per rank).
class lane_block {
public:
  lane_block(std::size_t pairs, std::size_t lanes, std::size_t eager_bytes)
      : lanes_(eager_bytes ? lanes : 0),
        stride_((sizeof(eager_lane) + eager_bytes + cache_line - 1) / cache_line * cache_line),
        blocks_(pairs) {}
  lane_block(const lane_block&) = delete;
  lane_block& operator=(const lane_block&) = delete;
  ~lane_block() {
    for (auto& b : blocks_)
      if (unsigned char* p = b.load(std::memory_order_relaxed))
        ::operator delete (p, std::align_val_t{cache_line});
  }
  std::size_t lanes() const noexcept { return lanes_; }
  /// The pair's lanes; null until its first eager send (for a receiver: nothing eager yet).
  unsigned char* find(std::size_t pair) const noexcept {
    return blocks_[pair].load(std::memory_order_acquire);
  }
  /// The pair's lanes, made now if this is its first eager send (thread-safe).
  unsigned char* get(std::size_t pair) {
    if (unsigned char* p = find(pair)) return p;
    auto* fresh =
        static_cast<unsigned char*>(::operator new (lanes_* stride_, std::align_val_t{cache_line}));
    for (std::size_t k = 0; k < lanes_; ++k) new (fresh + k * stride_) eager_lane();
    unsigned char* expected = nullptr;
    // release: a receiver that finds the block sees its lanes constructed
    if (blocks_[pair].compare_exchange_strong(expected, fresh, std::memory_order_release,
                                              std::memory_order_acquire))
      return fresh;
    ::operator delete (fresh, std::align_val_t{cache_line}); // another thread made it first
    return expected;
  }
  eager_lane& header(unsigned char* block, std::size_t lane) const noexcept {
    return *std::launder(reinterpret_cast<eager_lane*>(block + lane * stride_));
  }
  unsigned char* data(unsigned char* block, std::size_t lane) const noexcept {
    return block + lane * stride_ + sizeof(eager_lane);
  }

private:
  std::size_t lanes_;
  std::size_t stride_;
  std::vector<std::atomic<unsigned char*>> blocks_;
};

/// The team's rendezvous (`team_state`) plus the eager lanes and message numbers.
struct shared_state : team_state<send_slot> {
  explicit shared_state(int n, const thread_options& o)
      : team_state(n, o.timeout), eager_bytes(o.eager_lanes ? o.eager_bytes : 0),
        next_message(pairs(n)), queued(pairs(n)), lanes(pairs(n), o.eager_lanes, eager_bytes),
        spin_allowed(static_cast<unsigned>(n) <= std::max(1u, std::thread::hardware_concurrency())),
        sync(n) {}
  std::size_t eager_bytes;
  std::vector<padded_counter> next_message; // [pair]: message numbers handed out (sender side)
  std::vector<padded_counter> queued;       // [pair]: zero-copy sends in the box
  lane_block lanes;
  bool spin_allowed;
  std::barrier<> sync;
};

} // namespace detail::threads

/// One rank's endpoint of a `thread_team`; satisfies `tcoll::transport`.
class thread_transport {
public:
  static constexpr bool zero_copy = true;
  static constexpr std::string_view name = "threads";

  /// A pending transfer. Destroying a pending send withdraws it (or waits for a receiver
  /// that is copying from it), so unwinding after an error never leaves a dangling pointer.
  class request : public detail::rendezvous_request {
  public:
    request() = default;
    request(request&&) noexcept = default;
    request& operator=(request&& o) noexcept {
      withdraw();
      slot_ = std::move(o.slot_);
      state_ = o.state_;
      owner_ = o.owner_;
      rendezvous_request::operator=(o);
      return *this;
    }
    ~request() { withdraw(); }

  private:
    friend class thread_transport;
    void withdraw() noexcept {
      if (!slot_ || done_) return;
      if (state_->box(owner_, peer_).withdraw(slot_.get())) {
        state_->queued[state_->pair(owner_, peer_)].value.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
      while (slot_->state.load(std::memory_order_acquire) == 1) std::this_thread::yield();
    }
    std::unique_ptr<detail::threads::send_slot> slot_;
    detail::threads::shared_state* state_ = nullptr;
    int owner_ = -1;
  };

  thread_transport(detail::threads::shared_state& s, int rank) : state_(&s), rank_(rank) {}
  thread_transport(const thread_transport&) = delete;
  thread_transport& operator=(const thread_transport&) = delete;
  /// Stops this rank's communication engine (if one was started) before the endpoint goes.
  ~thread_transport() { context_.detach(); }

  /// Message spaces, broken state and engine of this rank's collectives.
  collective_context& collectives() noexcept { return context_; }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return state_->nranks; }
  std::chrono::milliseconds timeout() const noexcept { return state_->timeout; }

  /// Eager sends (see the file comment) are complete when this returns.
  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    request r = make(request::kind::send, peer, tag, bytes, "isend");
    const std::size_t pair = state_->pair(rank_, peer);
    // relaxed: one thread's sends get increasing numbers, which is all the matching needs
    const std::uint64_t number =
        state_->next_message[pair].value.fetch_add(1, std::memory_order_relaxed) + 1;
    if (bytes <= state_->eager_bytes && send_eager(pair, data, bytes, tag, number)) {
      r.done_ = true;
    } else {
      r.slot_ = std::make_unique<detail::threads::send_slot>();
      r.slot_->data = data;
      r.slot_->bytes = bytes;
      r.slot_->tag = tag;
      r.slot_->number = number;
      auto& box = state_->box(rank_, peer);
      std::lock_guard lock(box.mutex);
      box.queue.push_back(r.slot_.get());
      state_->queued[pair].value.fetch_add(1, std::memory_order_relaxed);
    }
    state_->bells[peer].ring();
    return r;
  }
  request irecv(int peer, void* dst, std::size_t bytes, int tag) {
    request r = make(request::kind::recv, peer, tag, bytes, "irecv");
    r.dst_ = dst;
    return r;
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* /*staging*/) {
    request r = make(request::kind::consume, peer, tag, bytes, "irecv_consume");
    r.use_ = use;
    return r;
  }

  /// Progresses `r` once; true when complete.
  bool test(request& r) {
    if (r.done_) return true;
    state_->throw_if_aborted(rank_, r.peer_);
    return r.is_send() ? test_send(r) : test_recv(r);
  }

  /// Blocks until `r` completes; throws `timeout_error` at `when`.
  void wait(request& r, deadline when) {
    if (!state_->bells[rank_].wait([&] { return test(r); }, when, state_->aborted,
                                   state_->spin_allowed ? 20000 : 0))
      throw r.timed_out(state_->timeout, rank_);
  }

  /// Makes every pending and future wait of every rank of the team throw `aborted_error`.
  void abort() noexcept { state_->abort(); }

  /// Team-wide barrier (for benchmarks and tests; algorithms never need it).
  void barrier() { state_->sync.arrive_and_wait(); }

private:
  /// A pending request of this rank with `peer`; `call` names the entry point in the error
  /// for a peer outside the team.
  request make(request::kind k, int peer, int tag, std::size_t bytes, const char* call) {
    state_->check_peer(peer, call, rank_);
    request r;
    r.start(k, peer, tag, bytes);
    r.state_ = state_;
    r.owner_ = rank_;
    return r;
  }
  bool test_send(request& r) {
    return r.finish_send(r.slot_->state.load(std::memory_order_acquire), rank_);
  }
  /// Copies a message into a free lane of `pair`; false when every lane is busy.
  bool send_eager(std::size_t pair, const void* data, std::size_t bytes, int tag,
                  std::uint64_t number) {
    using detail::threads::eager_lane;
    const std::size_t lanes = state_->lanes.lanes();
    unsigned char* block = state_->lanes.get(pair);
    // Round robin from the message number: the lane to claim is the one freed longest ago,
    // and the next one is fetched for writing now, while this rank goes on to wait.
    for (std::size_t i = 0; i < lanes; ++i) {
      const std::size_t k = static_cast<std::size_t>(number + i) % lanes;
      eager_lane& lane = state_->lanes.header(block, k);
      std::uint64_t expected = 0;
      // acquire: the previous receiver's reads of this lane happen before our writes
      if (lane.message.load(std::memory_order_relaxed) != 0 ||
          !lane.message.compare_exchange_strong(expected, eager_lane::writing,
                                                std::memory_order_acquire))
        continue;
      lane.tag.store(tag, std::memory_order_relaxed);
      lane.bytes.store(static_cast<std::uint32_t>(bytes), std::memory_order_relaxed);
      if (bytes) std::memcpy(state_->lanes.data(block, k), data, bytes);
      lane.message.store(number, std::memory_order_release);
      __builtin_prefetch(&state_->lanes.header(block, static_cast<std::size_t>(number + 1) % lanes),
                         1);
      return true;
    }
    return false;
  }

  /// The lowest-numbered published eager message of `pair` with `tag` (`number` is
  /// `eager_lane::taken_bit` when there is none).
  struct lane_match {
    unsigned char* block = nullptr;
    std::size_t lane = 0;
    std::uint64_t number = detail::threads::eager_lane::taken_bit;
  };
  lane_match scan_lanes(std::size_t pair, int tag) const {
    lane_match best;
    best.block = state_->lanes.find(pair);
    if (!best.block) return best;
    for (std::size_t k = 0; k < state_->lanes.lanes(); ++k) {
      const auto& lane = state_->lanes.header(best.block, k);
      const std::uint64_t m = lane.message.load(std::memory_order_acquire);
      if (m == 0 || m >= best.number) continue; // free, being written or taken, or newer
      if (lane.tag.load(std::memory_order_relaxed) != tag) continue;
      best.lane = k;
      best.number = m;
    }
    return best;
  }
  /// Whether the zero-copy queue of `pair` holds a send with `tag` (takes the box's lock).
  bool queue_has(std::size_t pair, detail::threads::mailbox& box, int tag) const {
    if (state_->queued[pair].value.load(std::memory_order_acquire) == 0) return false;
    std::lock_guard lock(box.mutex);
    return std::any_of(box.queue.begin(), box.queue.end(),
                       [&](const detail::threads::send_slot* s) { return s->tag == tag; });
  }

  /// The oldest message from `r.peer_` with `r.tag_`, on either path, is taken and consumed.
  bool test_recv(request& r) {
    using detail::threads::eager_lane;
    const std::size_t pair = state_->pair(r.peer_, rank_);
    auto& box = state_->box(r.peer_, rank_);
    for (;;) {
      // One pass reads the lanes one after another, so it can miss an older message that
      // was published while it ran. Having seen one candidate (an acquire of what its sender
      // did before it), a second pass sees every message the sender posted earlier.
      if (scan_lanes(pair, r.tag_).number == eager_lane::taken_bit && !queue_has(pair, box, r.tag_))
        return false;
      const lane_match found = scan_lanes(pair, r.tag_);
      if (state_->queued[pair].value.load(std::memory_order_acquire) > 0) {
        std::unique_lock lock(box.mutex);
        auto oldest = box.queue.end();
        for (auto it = box.queue.begin(); it != box.queue.end(); ++it)
          if ((*it)->tag == r.tag_ && (*it)->number < found.number &&
              (oldest == box.queue.end() || (*it)->number < (*oldest)->number))
            oldest = it;
        if (oldest != box.queue.end()) {
          detail::threads::send_slot* slot = *oldest;
          box.queue.erase(oldest);
          state_->queued[pair].value.fetch_sub(1, std::memory_order_relaxed);
          slot->state.store(1, std::memory_order_relaxed);
          lock.unlock();
          consume_slot(r, slot);
          return true;
        }
      }
      if (found.number == eager_lane::taken_bit) continue; // another thread of this rank won
      eager_lane& lane = state_->lanes.header(found.block, found.lane);
      std::uint64_t expected = found.number;
      if (!lane.message.compare_exchange_strong(expected, found.number | eager_lane::taken_bit,
                                                std::memory_order_acquire))
        continue; // another thread of this rank took it meanwhile: look again
      consume_lane(r, lane, state_->lanes.data(found.block, found.lane));
      return true;
    }
  }
  void consume_lane(request& r, detail::threads::eager_lane& lane, const unsigned char* data) {
    r.done_ = true;
    // frees the lane on every way out (the sender's next claim synchronizes with this store)
    struct free_lane {
      detail::threads::eager_lane& lane;
      ~free_lane() { lane.message.store(0, std::memory_order_release); }
    } on_exit{lane};
    const std::size_t sent = lane.bytes.load(std::memory_order_relaxed);
    if (sent != r.bytes_) throw r.size_mismatch(sent, rank_);
    if (r.kind_ == request::kind::recv) {
      if (r.bytes_) std::memcpy(r.dst_, data, r.bytes_);
    } else {
      r.use_(data, r.bytes_);
    }
  }
  void consume_slot(request& r, detail::threads::send_slot* slot) {
    r.accept(slot, *state_, rank_);
    try {
      if (r.kind_ == request::kind::recv) {
        if (r.bytes_) std::memcpy(r.dst_, slot->data, r.bytes_);
      } else {
        r.use_(slot->data, r.bytes_);
      }
    } catch (...) {
      state_->release(slot, 2, r.peer_);
      throw;
    }
    state_->release(slot, 2, r.peer_);
  }

  detail::threads::shared_state* state_;
  int rank_;
  collective_context context_; // last: destroyed first
};

static_assert(check_transport<thread_transport>());

/// N ranks as threads of this process. `run(f)` calls `f(thread_transport&)` on every rank
/// concurrently, joins them and rethrows the first root-cause error (a rank's own failure
/// is preferred over the `aborted_error` it caused elsewhere).
class thread_team {
public:
  explicit thread_team(int nranks, std::chrono::milliseconds timeout = std::chrono::seconds(60))
      : thread_team(nranks, thread_options{.timeout = timeout}) {}
  thread_team(int nranks, const thread_options& options) : nranks_(nranks), options_(options) {
    detail::check_team_arguments("thread_team", nranks, options.timeout);
    if (options.eager_bytes > detail::threads::max_eager_bytes)
      throw invalid_argument("thread_team: eager_bytes " + std::to_string(options.eager_bytes) +
                             " is above the limit of " +
                             std::to_string(detail::threads::max_eager_bytes));
    if (options.eager_lanes > 64)
      throw invalid_argument("thread_team: eager_lanes " + std::to_string(options.eager_lanes) +
                             " is above the limit of 64");
  }
  int size() const noexcept { return nranks_; }

  template <class F>
  void run(F&& f) {
    detail::threads::shared_state state(nranks_, options_);
    detail::team_failures failures(nranks_);
    auto body = [&](int rank) {
      thread_transport t(state, rank);
      failures.guard(
          rank, [&] { f(t); }, [&] { t.abort(); });
    };
    detail::run_ranks_on_threads(nranks_, body);
    failures.rethrow();
  }

private:
  int nranks_;
  thread_options options_;
};

} // namespace tcoll
