#pragma once
/// \file
/// `shm_transport`: the processes of one node exchange messages through one POSIX
/// shared-memory segment, with no MPI call, no lock shared between processes and no
/// allocation on the hot path. A `bootstrap` (transport/bootstrap.hpp: an MPI communicator
/// or a key-value store such as PyTorch's) is used only to build it: which ranks share
/// memory, the segment's name, a barrier and two agreements (mapped everywhere, single copy
/// permitted everywhere). Without MPI (`TCOLL_NO_MPI`, or no `<mpi.h>` on the include
/// path) only the bootstrap constructor exists.
///
/// Layout: every rank owns an *inbox* in the segment with, for each sender, `lanes`
/// lanes; a lane carries one message at a time, in fragments of `slot_bytes` through
/// `slots` slots (a pipeline: the sender fills slot k+1 while the receiver drains slot k).
/// Every header and slot flag sits on its own cache line.
///  - Send: the sender takes a free lane of the pair (in posting order, so messages
///    between one pair with the same tag match in order), writes tag and size, then
///    copies fragments into free slots; the send completes when the last fragment is in
///    shared memory (the user's buffer is free again).
///  - Receive: the receiver matches a lane of that sender by tag (the oldest such message)
///    and copies each fragment out (`irecv`) or hands it to the consumer (`irecv_consume`:
///    fragment by fragment through `consumer::piece`, each reduced straight from its slot).
///  - Tiny messages (at most 32 bytes) travel inside the lane header's own cache line.
///  - Other messages that fit one slot (at most `slot_bytes`) are copied into the lane's
///    first slot before the header is published, with no slot flag: the receiver touches
///    the header and the payload, not a third line, and the send completes at once.
///  - Long messages (`single_copy_min_bytes`) go single-copy where the ranks may read each
///    other's memory (probed at construction): the lane carries the sender's buffer
///    address, the receiver reads it with `process_vm_readv` (cross-memory attach) and then
///    frees the lane, which completes the send.
///  - Registered buffers (`allocate<T>(n)`, collective) live in shared memory that every
///    rank of the node maps: a message from one is neither copied by the sender nor read
///    through the kernel; the lane carries (region, offset) and the receiver reduces
///    straight from the sender's memory, as on the thread transport, then frees the lane,
///    which completes the send.
///  - Transfer states come from a pool: a steady stream of transfers allocates nothing.
///  - Waiting spins on the flags, then yields; with more ranks on the node than cores it
///    yields from the start. Every wait has the timeout; `abort()` raises a team-wide flag
///    in the segment that every wait of every rank checks.
///  - The segment's file is unlinked as soon as every rank has mapped it, so nothing is
///    left in /dev/shm whatever happens to the processes later.
///
/// Limits: a lane is held by its message until the receiver has drained it, so a sender
/// with more than `lanes` messages to one peer that the peer does not receive yet waits
/// (the collectives never have more than two or three in flight per pair per collective;
/// raise `lanes` for many concurrent collectives). A peer process that dies is seen as a
/// timeout naming it.
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "bootstrap.hpp"
#include "shm/area.hpp"
#include "shm/options.hpp"
#include "shm/registered.hpp"
#include "shm/segment.hpp"
#include "shm/single_copy.hpp"

#if !defined(TCOLL_NO_MPI) && __has_include(<mpi.h>)
#include "bootstrap_mpi.hpp"
#define TCOLL_SHM_FROM_MPI 1
#endif

namespace tcoll {

/// Ranks are the processes of one node, as a `bootstrap` (an MPI communicator or a
/// key-value store) numbers them (see the file comment); satisfies `tcoll::transport`.
/// Collective to construct (every rank of the team); the destructor is local. Not copyable or
/// movable (peers' requests point into it).
class shm_transport {
  struct send_state;
  struct recv_state;

public:
  static constexpr bool zero_copy = false;
  static constexpr bool shared_memory = true; ///< `automatic` uses its shared-memory choice
  static constexpr std::string_view name = "shm";

  /// A pending transfer. Destroying a pending one withdraws it from the transport.
  class request {
  public:
    request() = default;
    request(request&& o) noexcept { *this = std::move(o); }
    request& operator=(request&& o) noexcept {
      if (this != &o) {
        withdraw();
        owner_ = std::exchange(o.owner_, nullptr);
        send_ = std::exchange(o.send_, nullptr);
        recv_ = std::exchange(o.recv_, nullptr);
        done_ = std::exchange(o.done_, true);
      }
      return *this;
    }
    request(const request&) = delete;
    request& operator=(const request&) = delete;
    ~request() { withdraw(); }
    bool done() const noexcept { return done_; }

  private:
    friend class shm_transport;
    void withdraw() noexcept {
      if (owner_) owner_->forget(*this);
      owner_ = nullptr;
    }
    shm_transport* owner_ = nullptr;
    send_state* send_ = nullptr; ///< the transport's (its pool owns the states)
    recv_state* recv_ = nullptr;
    bool done_ = true;
  };

  /// Maps the node's segment; collective over the team of `boot`, which the transport keeps
  /// (for `allocate`). Throws `invalid_argument` when the ranks do not all share memory
  /// with this one, `transport_error` when the segment cannot be made.
  explicit shm_transport(std::unique_ptr<tcoll::bootstrap> boot, shm_options options = {})
      : options_(options), layout_(1, options), boot_(std::move(boot)) {
    if (!boot_) throw invalid_argument("shm_transport: the bootstrap is null");
    rank_ = boot_->rank();
    size_ = boot_->size();
    agree_on_options();
    const int node_size = boot_->ranks_sharing_memory();
    if (node_size != size_)
      throw invalid_argument("shm_transport: the team spans several nodes (" +
                                 std::to_string(node_size) + " of its " + std::to_string(size_) +
                                 " ranks share memory with this one); use "
                                 "mpi_transport::split_shared() or hierarchical<>",
                             rank_);
    layout_ = detail::shm::layout(size_, options);
    spin_allowed_ = ranks_have_cpus(size_);
    map_segment();
    single_copy_ = probe_single_copy();
    if (single_copy_) {
      std::vector<pid_t> pids(static_cast<std::size_t>(size_));
      for (int q = 0; q < size_; ++q) pids[std::size_t(q)] = static_cast<pid_t>(identity(q).pid);
      area_->allow_single_copy(std::move(pids));
    }
    sent_count_.assign(static_cast<std::size_t>(size_), 0);
    claimed_.assign(static_cast<std::size_t>(size_) * options_.lanes, 0);
    observed_.assign(static_cast<std::size_t>(size_), 0);
    sends_.resize(static_cast<std::size_t>(size_));
    recvs_.resize(static_cast<std::size_t>(size_));
  }
  /// Maps the node's segment; collective over `comm`, an `MPI_Comm` (see the bootstrap
  /// constructor). A template on a trait, not an `#ifdef`: the class is the same in a
  /// translation unit built with MPI and in one without, which may then share its code.
  template <class Communicator>
  requires requires { typename detail::bootstrap_for<Communicator>::type; }
  explicit shm_transport(Communicator comm, shm_options options = {})
      : shm_transport(std::make_unique<typename detail::bootstrap_for<Communicator>::type>(comm),
                      options) {}
  shm_transport(const shm_transport&) = delete;
  shm_transport& operator=(const shm_transport&) = delete;
  ~shm_transport() {
    context_.detach(); // stops a communication engine that still uses this transport
    if (base_) munmap(base_, layout_.total);
  }

  collective_context& collectives() noexcept { return context_; }
  /// Whether `ranks` processes of one node may each have a CPU of its own (no more of them
  /// than the node has CPUs online): where they may, waits spin before they yield and the
  /// collective area's broadcast goes in pieces. The same answer on every rank of a node.
  static bool ranks_have_cpus(int ranks) noexcept {
    // read once per process: the query is a system call or a file read, and a route
    // decided per call must not pay it
    static const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
    return ranks >= 1 && static_cast<unsigned>(ranks) <= cpus;
  }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::chrono::milliseconds timeout() const noexcept { return options_.timeout; }
  const shm_options& options() const noexcept { return options_; }
  /// The collective area of the segment, where the in-segment collectives run
  /// (algorithm/in_segment.hpp).
  shm_segment_area& segment_area() noexcept { return *area_; }
  /// Bytes of the shared segment (all ranks' inboxes).
  std::size_t segment_bytes() const noexcept { return layout_.total; }
  /// Whether long messages go single-copy (every rank can read every other's memory with
  /// `process_vm_readv`, and `options.single_copy_min_bytes` does not turn it off); the
  /// same on every rank.
  bool single_copy() const noexcept { return single_copy_; }

  /// A registered buffer of `count` elements for this rank (see `shm_buffer`). Collective:
  /// every rank of the team calls it, in the same order, each with its own count (0
  /// allowed). Throws `invalid_argument` for a count too large, `transport_error` (on
  /// every rank) when a segment cannot be made or mapped (/dev/shm too small).
  template <class T>
  shm_buffer<T> allocate(std::size_t count) {
    static_assert(std::is_trivially_copyable_v<T>, "registered buffers hold trivially "
                                                   "copyable elements");
    if (count > std::numeric_limits<std::size_t>::max() / 2 / sizeof(T))
      throw invalid_argument(
          "shm_transport::allocate: count " + std::to_string(count) + " is too large", rank_);
    const std::size_t bytes =
        detail::shm::round_up(std::max<std::size_t>(1, count * sizeof(T)),
                              static_cast<std::size_t>(detail::shm::page_size()));
    std::vector<std::shared_ptr<detail::shm::mapping>> maps =
        detail::shm::map_region(*boot_, bytes);
    auto own = maps[static_cast<std::size_t>(rank_)];
    std::lock_guard lock(mutex_);
    const std::uint64_t id = regions_.size();
    maps[static_cast<std::size_t>(rank_)] = nullptr; // this rank's own: held by the buffer
    regions_.push_back(std::move(maps));
    std::erase_if(own_regions_, [](const detail::shm::own_region& g) { return g.alive.expired(); });
    own_regions_.push_back({id, own->base, count * sizeof(T), own});
    return shm_buffer<T>(std::move(own), count);
  }
  /// Whether `bytes` at `p` lie in one of this rank's live registered buffers.
  bool registered(const void* p, std::size_t bytes) const {
    std::lock_guard lock(mutex_);
    return detail::shm::find_region(own_regions_, static_cast<const unsigned char*>(p), bytes) !=
           nullptr;
  }

  /// Messages this rank has sent from registered buffers (read by the receiver in place).
  std::uint64_t registered_messages() const {
    std::lock_guard lock(mutex_);
    return registered_messages_;
  }

  /// Messages this rank has sent single copy (read by the receiver from this process).
  std::uint64_t single_copy_messages() const {
    std::lock_guard lock(mutex_);
    return single_copy_messages_;
  }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    check_peer(peer, "isend");
    check_buffer(data, bytes, "isend", peer);
    return post_send(peer, data, bytes, tag,
                     bytes > options_.slot_bytes && bytes >= options_.single_copy_min_bytes);
  }
  /// `isend` of a message whose receiver posts `irecv` for it (`takes_irecv_hint`): single
  /// copy from `options.single_copy_irecv_min_bytes` on, where the team may use it.
  request isend_for_irecv(int peer, const void* data, std::size_t bytes, int tag) {
    check_peer(peer, "isend_for_irecv");
    check_buffer(data, bytes, "isend_for_irecv", peer);
    return post_send(peer, data, bytes, tag, bytes >= options_.single_copy_irecv_min_bytes);
  }
  request irecv(int peer, void* dst, std::size_t bytes, int tag) {
    check_peer(peer, "irecv");
    check_buffer(dst, bytes, "irecv", peer);
    return post_recv(peer, static_cast<unsigned char*>(dst), bytes, tag, {});
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* staging) {
    check_peer(peer, "irecv_consume");
    // staging is read into where the message may come single copy (from a slot otherwise):
    // above a slot, or from the threshold of a sender that knows this receive only copies
    if (bytes > options_.slot_bytes ||
        (single_copy_ && bytes >= options_.single_copy_irecv_min_bytes))
      check_buffer(staging, bytes, "irecv_consume staging", peer);
    return post_recv(peer, static_cast<unsigned char*>(staging), bytes, tag, use);
  }

  /// Local (MPI_Iprobe): whether a message from `peer` with `tag` has arrived that no
  /// receive posted before this call will take, so that a receive posted now would match
  /// it. Nothing is claimed; receives of any source probe each peer, then post.
  bool probe(int peer, int tag) {
    check_peer(peer, "probe");
    std::lock_guard lock(mutex_);
    // the receives already posted for this pair and tag take the oldest messages first
    std::size_t ahead = 0;
    for (const recv_state* r : recvs_[static_cast<std::size_t>(peer)])
      if (!r->done && r->lane < 0 && r->tag == tag) ++ahead;
    std::uint64_t present[64];
    observe(peer, present);
    std::size_t waiting = 0;
    for (std::size_t l = 0; l < options_.lanes; ++l)
      if (claimable(peer, l, present[l], tag)) ++waiting;
    return waiting > ahead;
  }

  /// Progresses every pending transfer (to and from every peer) once; true when `r` is
  /// complete.
  bool test(request& r) {
    if (r.done_) return true;
    throw_if_aborted(r);
    std::lock_guard lock(mutex_);
    // Every peer, not only r's: a rank waiting for its left neighbour must keep feeding
    // its right one, or a ring of multi-fragment messages deadlocks.
    for (int peer = 0; peer < size_; ++peer) {
      if (!sends_[static_cast<std::size_t>(peer)].empty()) progress_sends(peer);
      if (!recvs_[static_cast<std::size_t>(peer)].empty()) progress_recvs(peer);
    }
    return finished(r);
  }

  /// Blocks until `r` completes; throws `timeout_error` naming the peer at `when`.
  void wait(request& r, deadline when) {
    int polls = 0;
    clock::time_point yielding_since{}; // set at the first yield where sleeping is on
    while (!test(r)) {
      ++polls;
      if ((polls & 63) == 0 && clock::now() >= when) {
        const bool is_send = r.send_ != nullptr;
        const int peer = is_send ? r.send_->peer : r.recv_->peer;
        const std::size_t bytes = is_send ? r.send_->bytes : r.recv_->bytes;
        const int tag = is_send ? r.send_->tag : r.recv_->tag;
        throw timeout_error(
            std::string(is_send ? "send" : "receive") + " of " + std::to_string(bytes) +
                " bytes (tag " + std::to_string(tag) + ") through shared memory timed out after " +
                std::to_string(options_.timeout.count()) + " ms; " + describe_pair(peer),
            rank_, peer);
      }
      if (spin_allowed_ && polls <= options_.spins_before_yield) continue;
      if (options_.sleep_after.count() > 0) {
        const auto now = clock::now();
        if (yielding_since == clock::time_point{}) yielding_since = now;
        if (now - yielding_since >= options_.sleep_after) {
          std::this_thread::sleep_for(options_.idle_sleep);
          continue;
        }
      }
      std::this_thread::yield();
    }
  }

  /// Blocks until every rank of the node has called it (a counter in shared memory; no
  /// message, so it does not use a message space). Throws `timeout_error` after the
  /// timeout and `aborted_error` after an abort.
  void barrier() {
    auto& c = control();
    const std::uint32_t generation = c.generation.load(std::memory_order_acquire);
    if (c.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
        static_cast<std::uint32_t>(size_)) {
      c.arrived.store(0, std::memory_order_relaxed);
      c.generation.store(generation + 1, std::memory_order_release);
      return;
    }
    const auto when = clock::now() + options_.timeout;
    for (int polls = 1; c.generation.load(std::memory_order_acquire) == generation; ++polls) {
      if (c.aborted.load(std::memory_order_acquire))
        throw aborted_error("barrier aborted because rank " +
                                std::to_string(c.aborted_by.load(std::memory_order_relaxed)) +
                                " of the shared-memory team failed",
                            rank_);
      if ((polls & 63) == 0 && clock::now() >= when)
        throw timeout_error("barrier through shared memory timed out after " +
                                std::to_string(options_.timeout.count()) + " ms",
                            rank_);
      if (!spin_allowed_ || polls > options_.spins_before_yield) std::this_thread::yield();
    }
  }

  /// Makes every pending and future wait of every rank of the node throw `aborted_error`.
  void abort() noexcept {
    int expected = -1;
    control().aborted_by.compare_exchange_strong(expected, rank_);
    control().aborted.store(1, std::memory_order_release);
  }

private:
  struct send_state {
    int peer = 0, tag = 0;
    const unsigned char* data = nullptr;
    std::size_t bytes = 0;
    std::uint64_t message = 0; ///< number among this rank's messages to `peer`, from 1
    std::ptrdiff_t lane = -1;  ///< lane held, -1 before one is free
    std::size_t fragments_written = 0;
    bool single_copy = false; ///< the receiver reads `data` itself
    bool registered = false;  ///< data lies in this rank's registered region `region`
    std::uint64_t region = 0;
    std::uint64_t region_offset = 0;
    bool done = false;
  };
  struct recv_state {
    int peer = 0, tag = 0;
    unsigned char* dst = nullptr; ///< user buffer (irecv) or staging (irecv_consume)
    std::size_t bytes = 0;
    consumer use{};
    std::ptrdiff_t lane = -1;
    std::size_t fragments_read = 0;
    bool done = false;
    std::exception_ptr error;
  };

  detail::shm::control& control() const {
    return *std::launder(reinterpret_cast<detail::shm::control*>(base_));
  }
  const detail::shm::identity& identity(int r) const {
    return *std::launder(
        reinterpret_cast<const detail::shm::identity*>(base_ + layout_.identity_offset(r)));
  }
  detail::shm::lane_header& lane(int receiver, int sender, std::size_t l) const {
    return *std::launder(reinterpret_cast<detail::shm::lane_header*>(
        base_ + layout_.lane_offset(receiver, sender, l)));
  }
  detail::shm::slot_header& slot(int receiver, int sender, std::size_t l, std::size_t s) const {
    return *std::launder(reinterpret_cast<detail::shm::slot_header*>(
        base_ + layout_.slot_offset(receiver, sender, l, s)));
  }
  unsigned char* payload(int receiver, int sender, std::size_t l, std::size_t s) const {
    return base_ + layout_.slot_offset(receiver, sender, l, s) + sizeof(detail::shm::slot_header);
  }
  std::size_t fragments(std::size_t bytes) const {
    return std::max<std::size_t>(1, (bytes + options_.slot_bytes - 1) / options_.slot_bytes);
  }

  /// Collective: every rank checks its own options, then all compare the ones that shape
  /// the segment and the protocol. An invalid option on any rank, or options that differ
  /// between ranks, fail construction on every rank (naming the rank and the option)
  /// instead of leaving the others waiting or reading a segment laid out differently.
  void agree_on_options() {
    std::string problem;
    try {
      detail::shm::check_options(options_, rank_);
    } catch (const invalid_argument& e) {
      problem = e.what();
    }
    const std::uint64_t mine[] = {problem.empty() ? 1u : 0u,
                                  options_.lanes,
                                  options_.slots,
                                  options_.slot_bytes,
                                  options_.single_copy_min_bytes,
                                  options_.single_copy_irecv_min_bytes,
                                  options_.single_copy_piece_bytes,
                                  options_.area_lines,
                                  options_.area_bulk_bytes};
    static constexpr const char* names[] = {"",
                                            "lanes",
                                            "slots",
                                            "slot_bytes",
                                            "single_copy_min_bytes",
                                            "single_copy_irecv_min_bytes",
                                            "single_copy_piece_bytes",
                                            "area_lines",
                                            "area_bulk_bytes"};
    constexpr std::size_t fields = std::size(mine);
    const std::vector<std::uint8_t> all =
        boot_->allgather({reinterpret_cast<const std::uint8_t*>(mine), sizeof mine});
    if (!problem.empty()) throw invalid_argument(problem, rank_);
    for (int q = 0; q < size_; ++q) {
      std::uint64_t theirs[fields];
      std::memcpy(theirs, all.data() + static_cast<std::size_t>(q) * sizeof mine, sizeof mine);
      if (!theirs[0])
        throw invalid_argument("shm_transport: rank " + std::to_string(q) +
                                   " passed invalid shm_options (its error names the option)",
                               rank_, q);
      for (std::size_t f = 1; f < fields; ++f)
        if (theirs[f] != mine[f])
          throw invalid_argument("shm_transport: options." + std::string(names[f]) +
                                     " differs between ranks: " + std::to_string(mine[f]) +
                                     " here, " + std::to_string(theirs[f]) + " on rank " +
                                     std::to_string(q) + " (every rank must pass the same)",
                                 rank_, q);
    }
  }
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_)
      throw invalid_argument(std::string(what) + ": peer " + std::to_string(peer) +
                                 " is outside [0, " + std::to_string(size_) + ")",
                             rank_);
  }
  void check_buffer(const void* p, std::size_t bytes, const char* what, int peer) const {
    if (bytes && !p)
      throw invalid_argument(
          std::string(what) + ": null buffer for " + std::to_string(bytes) + " bytes", rank_, peer);
  }
  void throw_if_aborted(const request& r) const {
    if (control().aborted.load(std::memory_order_acquire)) {
      const int peer = r.send_ ? r.send_->peer : r.recv_ ? r.recv_->peer : -1;
      const int by = control().aborted_by.load(std::memory_order_relaxed);
      throw aborted_error("operation aborted because rank " + std::to_string(by) +
                              " of the shared-memory team failed",
                          rank_, peer);
    }
  }

  request make() {
    request r;
    r.owner_ = this;
    r.done_ = false;
    return r;
  }

  request post_recv(int peer, unsigned char* dst, std::size_t bytes, int tag, consumer use) {
    request r = make();
    std::lock_guard lock(mutex_);
    recv_state* s = acquire(recv_states_);
    s->peer = peer;
    s->dst = dst;
    s->bytes = bytes;
    s->tag = tag;
    s->use = use;
    recvs_[static_cast<std::size_t>(peer)].push_back(s);
    r.recv_ = s;
    return r;
  }

  /// Queues a send of `bytes` at `data` to `peer`, single copy where `single_copy_size` says
  /// the size calls for it and the team may use it (registered buffers go in place).
  request post_send(int peer, const void* data, std::size_t bytes, int tag, bool single_copy_size) {
    request r = make();
    std::lock_guard lock(mutex_);
    send_state* s = acquire(send_states_);
    s->peer = peer;
    s->data = static_cast<const unsigned char*>(data);
    s->bytes = bytes;
    s->tag = tag;
    if (bytes > detail::shm::inline_bytes && !own_regions_.empty())
      if (const auto* g = detail::shm::find_region(own_regions_, s->data, bytes)) {
        s->registered = true;
        s->region = g->id;
        s->region_offset = static_cast<std::uint64_t>(s->data - g->base);
        ++registered_messages_;
      }
    s->single_copy = !s->registered && single_copy_ && single_copy_size;
    if (s->single_copy) ++single_copy_messages_;
    s->message = ++sent_count_[static_cast<std::size_t>(peer)];
    sends_[static_cast<std::size_t>(peer)].push_back(s);
    r.send_ = s;
    progress_sends(peer);
    return r;
  }

  /// Lanes are taken in message order; fragments of every laned send are written as slots
  /// free up.
  void progress_sends(int peer) {
    auto& list = sends_[static_cast<std::size_t>(peer)];
    for (send_state* s : list) {
      if (s->done) continue;
      if (s->lane < 0) {
        for (std::size_t l = 0; l < options_.lanes && s->lane < 0; ++l) {
          auto& h = lane(peer, rank_, l);
          if (h.message.load(std::memory_order_acquire) != 0) continue;
          h.bytes = s->bytes;
          h.tag = s->tag;
          h.address = reinterpret_cast<std::uint64_t>(s->data);
          const bool tiny = s->bytes <= detail::shm::inline_bytes;
          // A free lane has all its slots drained, so the first slot's payload is free too.
          const bool one_slot =
              !tiny && !s->registered && !s->single_copy && s->bytes <= options_.slot_bytes;
          h.mode = tiny             ? detail::shm::lane_mode::inline_data
                   : one_slot       ? detail::shm::lane_mode::one_slot
                   : s->registered  ? detail::shm::lane_mode::registered
                   : s->single_copy ? detail::shm::lane_mode::single_copy
                                    : detail::shm::lane_mode::slots;
          if (s->registered) {
            h.address = s->region_offset;
            h.region = s->region;
          }
          if (tiny && s->bytes) std::memcpy(h.data, s->data, s->bytes);
          if (one_slot) std::memcpy(payload(peer, rank_, l, 0), s->data, s->bytes);
          h.message.store(s->message, std::memory_order_release);
          s->lane = static_cast<std::ptrdiff_t>(l);
          // The user's buffer is free once copied; the receiver frees the lane.
          if (tiny || one_slot) s->done = true;
        }
        if (s->lane < 0) break; // later sends must not overtake this one
      }
      if (!s->done) write_fragments(*s);
    }
  }

  void write_fragments(send_state& s) {
    const std::size_t total = fragments(s.bytes);
    const auto l = static_cast<std::size_t>(s.lane);
    if (s.single_copy || s.registered) { // done once the receiver has read it and freed the lane
      if (lane(s.peer, rank_, l).message.load(std::memory_order_acquire) == s.message) return;
      s.done = true;
      s.lane = -1;
      return;
    }
    while (s.fragments_written < total) {
      const std::size_t k = s.fragments_written;
      auto& h = slot(s.peer, rank_, l, k % options_.slots);
      if (h.fragment.load(std::memory_order_acquire) != 0) return; // not drained yet
      const std::size_t offset = k * options_.slot_bytes;
      const std::size_t n = std::min(options_.slot_bytes, s.bytes - std::min(s.bytes, offset));
      if (n) std::memcpy(payload(s.peer, rank_, l, k % options_.slots), s.data + offset, n);
      h.bytes = n;
      h.fragment.store(k + 1, std::memory_order_release);
      ++s.fragments_written;
    }
    s.done = true;
    s.lane = -1; // the receiver frees the lane itself
  }

  void progress_recvs(int peer) {
    auto& list = recvs_[static_cast<std::size_t>(peer)];
    std::uint64_t blocked_tags_seen = 0; // tags without a match this pass (small set)
    std::int32_t blocked[8];
    auto is_blocked = [&](int tag) {
      for (std::uint64_t i = 0; i < std::min<std::uint64_t>(blocked_tags_seen, 8); ++i)
        if (blocked[i] == tag) return true;
      return blocked_tags_seen > 8; // too many to track: keep strict posting order
    };
    for (recv_state* r : list) {
      if (r->done) continue;
      if (r->lane < 0) {
        if (is_blocked(r->tag)) continue;
        if (!claim(*r)) {
          if (blocked_tags_seen < 8) blocked[blocked_tags_seen] = r->tag;
          ++blocked_tags_seen;
          continue;
        }
      }
      read_fragments(*r);
    }
  }

  /// What a timeout report needs to tell a full lane from a missing send: the lanes
  /// `peer` fills for this rank and this rank's for `peer` (message number, tag, bytes;
  /// "-" free), the receives and sends this rank has pending with `peer`.
  std::string describe_pair(int peer) {
    std::lock_guard lock(mutex_);
    const auto p = static_cast<std::size_t>(peer);
    auto lanes = [&](int receiver, int sender) {
      std::string s;
      for (std::size_t l = 0; l < options_.lanes; ++l) {
        const auto& h = lane(receiver, sender, l);
        const std::uint64_t m = h.message.load(std::memory_order_acquire);
        s += l ? " " : "";
        s += m ? std::to_string(m) + ":" + std::to_string(h.tag) + ":" + std::to_string(h.bytes)
               : "-";
      }
      return s;
    };
    std::string s = "lanes from peer [" + lanes(rank_, peer) + "] (all seen up to message " +
                    std::to_string(observed_[p]) + "), lanes to peer [" + lanes(peer, rank_) +
                    "] (" + std::to_string(sent_count_[p]) + " messages posted); receives pending:";
    // appended piece by piece: GCC 12 warns falsely (-Wrestrict) on `" " + std::string&&`
    for (const recv_state* r : recvs_[p])
      if (!r->done)
        s.append(" ").append(std::to_string(r->tag)).append(r->lane >= 0 ? "(matched)" : "");
    s += "; sends pending:";
    for (const send_state* q : sends_[p])
      if (!q->done)
        s.append(" ")
            .append(std::to_string(q->message))
            .append(":")
            .append(std::to_string(q->tag))
            .append(q->lane >= 0 ? "(in lane)" : "");
    return s;
  }

  /// Takes the oldest unclaimed message of `r.peer` with `r.tag`, if any.
  ///
  /// One scan of the lanes is not a snapshot: the sender may publish message m into a
  /// lane already scanned and m + 1 into one not yet scanned, and taking m + 1 would
  /// break the matching order. A message stays in its lane until this rank drains it, so
  /// `observed_[peer]` (every message up to it has been seen in a lane) only grows, and
  /// only messages up to it are candidates: all of them are visible in every later scan.
  bool claim(recv_state& r) {
    std::uint64_t present[64];
    observe(r.peer, present);
    std::uint64_t best = 0;
    std::size_t best_lane = 0;
    for (std::size_t l = 0; l < options_.lanes; ++l) {
      const std::uint64_t m = present[l];
      if (!claimable(r.peer, l, m, r.tag)) continue;
      if (best == 0 || m < best) best = m, best_lane = l;
    }
    if (best == 0) return false;
    claimed_[claim_index(r.peer, best_lane)] = best;
    r.lane = static_cast<std::ptrdiff_t>(best_lane);
    const std::uint64_t sent = lane(rank_, r.peer, best_lane).bytes;
    if (sent != r.bytes)
      r.error = std::make_exception_ptr(transport_error(
          "receive of " + std::to_string(r.bytes) + " bytes (tag " + std::to_string(r.tag) +
              ") matched a send of " + std::to_string(sent) + " bytes",
          rank_, r.peer));
    return true;
  }
  /// Reads the message number in each lane of `peer` (into `present`, one per lane) and
  /// advances `observed_[peer]` over those seen in order.
  void observe(int peer, std::uint64_t* present) {
    const auto p = static_cast<std::size_t>(peer);
    for (std::size_t l = 0; l < options_.lanes; ++l)
      present[l] = lane(rank_, peer, l).message.load(std::memory_order_acquire);
    for (bool advanced = true; advanced;) {
      advanced = false;
      for (std::size_t l = 0; l < options_.lanes; ++l)
        if (present[l] == observed_[p] + 1) ++observed_[p], advanced = true;
    }
  }
  /// Message `m` in lane `l` of `peer` may be taken by a receive of `tag`: observed in
  /// order, not yet claimed by this rank, and of that tag.
  bool claimable(int peer, std::size_t l, std::uint64_t m, int tag) const {
    if (m == 0 || m > observed_[static_cast<std::size_t>(peer)] ||
        claimed_[claim_index(peer, l)] == m)
      return false;
    return lane(rank_, peer, l).tag == tag;
  }
  std::size_t claim_index(int peer, std::size_t l) const {
    return static_cast<std::size_t>(peer) * options_.lanes + l;
  }

  void read_fragments(recv_state& r) {
    const auto l = static_cast<std::size_t>(r.lane);
    auto& h = lane(rank_, r.peer, l);
    if (h.mode == detail::shm::lane_mode::single_copy) return read_single_copy(r, h);
    if (h.mode == detail::shm::lane_mode::inline_data) return read_copied(r, h, h.data);
    if (h.mode == detail::shm::lane_mode::one_slot)
      return read_copied(r, h, payload(rank_, r.peer, l, 0));
    if (h.mode == detail::shm::lane_mode::registered) return read_registered(r, h);
    // Only messages longer than a slot come here (shorter ones are `one_slot`).
    const std::size_t total = fragments(h.bytes);
    const bool pieces = r.use.piece != nullptr; // each fragment reduced from its slot
    while (r.fragments_read < total) {
      const std::size_t k = r.fragments_read;
      auto& sh = slot(rank_, r.peer, l, k % options_.slots);
      if (sh.fragment.load(std::memory_order_acquire) != k + 1) return; // not written yet
      const unsigned char* data = payload(rank_, r.peer, l, k % options_.slots);
      if (!r.error) {
        try {
          if (pieces) {
            r.use(k * options_.slot_bytes, data, sh.bytes);
          } else if (sh.bytes) {
            std::memcpy(r.dst + k * options_.slot_bytes, data, sh.bytes);
          }
        } catch (...) {
          r.error = std::current_exception();
        }
      }
      sh.fragment.store(0, std::memory_order_release);
      ++r.fragments_read;
    }
    h.message.store(0, std::memory_order_release); // the lane is free for the sender
    r.done = true;
    if (!r.error && r.use.fn && !pieces) {
      try {
        r.use(r.dst, r.bytes);
      } catch (...) {
        r.error = std::current_exception();
      }
    }
  }

  /// A message the sender copied whole into the lane (header line or first slot):
  /// consumed or copied out, then the lane is freed.
  void read_copied(recv_state& r, detail::shm::lane_header& h, const unsigned char* data) {
    if (!r.error) {
      try {
        if (r.use.fn)
          r.use(data, r.bytes);
        else if (r.bytes)
          std::memcpy(r.dst, data, r.bytes);
      } catch (...) {
        r.error = std::current_exception();
      }
    }
    h.message.store(0, std::memory_order_release);
    r.done = true;
  }

  /// Reads a single-copy message from the sender's process: straight into the user's
  /// buffer (`irecv`), or piece by piece into the start of the staging buffer, each piece
  /// consumed while in cache (`irecv_consume`). Then frees the lane, completing the send.
  void read_single_copy(recv_state& r, detail::shm::lane_header& h) {
    if (!r.error) {
      try {
        const std::uint64_t remote = h.address;
        if (!r.use.fn) {
          read_peer(r.peer, r.dst, remote, r.bytes);
        } else if (r.use.piece) {
          const std::size_t piece = options_.single_copy_piece_bytes;
          for (std::size_t offset = 0; offset < r.bytes; offset += piece) {
            const std::size_t n = std::min(piece, r.bytes - offset);
            read_peer(r.peer, r.dst, remote + offset, n);
            r.use(offset, r.dst, n);
          }
        } else {
          read_peer(r.peer, r.dst, remote, r.bytes);
          r.use(r.dst, r.bytes);
        }
      } catch (...) {
        r.error = std::current_exception();
      }
    }
    h.message.store(0, std::memory_order_release);
    r.done = true;
  }

  /// Reads a message from the sender's registered region where this process maps it:
  /// consumed straight from there (`irecv_consume`, no staging) or copied out. Then frees
  /// the lane, completing the send.
  void read_registered(recv_state& r, detail::shm::lane_header& h) {
    if (!r.error) {
      try {
        const std::uint64_t id = h.region, offset = h.address;
        const detail::shm::mapping* m =
            id < regions_.size() ? regions_[id][static_cast<std::size_t>(r.peer)].get() : nullptr;
        if (!m || offset > m->bytes || r.bytes > m->bytes - offset)
          throw transport_error("message names registered region " + std::to_string(id) +
                                    " at offset " + std::to_string(offset) +
                                    ", which this rank does not map (allocate is collective: "
                                    "every rank must call it in the same order)",
                                rank_, r.peer);
        const unsigned char* data = m->base + offset;
        if (r.use.fn)
          r.use(data, r.bytes);
        else if (r.bytes)
          std::memcpy(r.dst, data, r.bytes);
      } catch (...) {
        r.error = std::current_exception();
      }
    }
    h.message.store(0, std::memory_order_release);
    r.done = true;
  }

  /// `bytes` at `address` in `peer`'s process into `dst` (cross-memory attach).
  void read_peer(int peer, void* dst, std::uint64_t address, std::size_t bytes) const {
    detail::shm::read_process(static_cast<pid_t>(identity(peer).pid), dst, address, bytes, rank_,
                              peer);
  }

  /// Collective: can every rank read every other's memory? Each rank reads the probe word
  /// of every other; the answer is their agreement (so every rank sends the same way).
  bool probe_single_copy() const {
    bool ok = options_.single_copy_min_bytes != std::numeric_limits<std::size_t>::max();
    for (int peer = 0; ok && peer < size_; ++peer)
      if (peer != rank_)
        ok = detail::shm::can_read(static_cast<pid_t>(identity(peer).pid),
                                   identity(peer).probe_address, probe_value);
    return detail::bootstrap::all_of(*boot_, ok);
  }

  /// Under the lock: true when `r` completed (its state is then dropped); rethrows a
  /// receive's error.
  bool finished(request& r) {
    std::exception_ptr error;
    if (r.send_) {
      if (!r.send_->done) return false;
      erase(sends_[static_cast<std::size_t>(r.send_->peer)], r.send_);
      release(send_states_, std::exchange(r.send_, nullptr));
    } else {
      if (!r.recv_->done) return false;
      error = std::move(r.recv_->error);
      erase(recvs_[static_cast<std::size_t>(r.recv_->peer)], r.recv_);
      release(recv_states_, std::exchange(r.recv_, nullptr));
    }
    r.done_ = true;
    r.owner_ = nullptr;
    if (error) std::rethrow_exception(error);
    return true;
  }

  /// Drops a request's state from the lists (abandoned while unwinding: a half-sent or
  /// half-read message then stays in its lane; the transport is broken by then anyway).
  void forget(request& r) noexcept {
    std::lock_guard lock(mutex_);
    if (r.send_) {
      erase(sends_[static_cast<std::size_t>(r.send_->peer)], r.send_);
      release(send_states_, std::exchange(r.send_, nullptr));
    }
    if (r.recv_) {
      erase(recvs_[static_cast<std::size_t>(r.recv_->peer)], r.recv_);
      release(recv_states_, std::exchange(r.recv_, nullptr));
    }
  }

  /// Transfer states, allocated while the number in flight grows past what was ever in
  /// flight before and then reused, so a steady stream of transfers allocates nothing.
  template <class State>
  struct state_pool {
    std::vector<std::unique_ptr<State>> all;
    std::vector<State*> free; ///< capacity kept at all.size(): giving back never allocates
  };
  /// Under the lock: a cleared state.
  template <class State>
  static State* acquire(state_pool<State>& pool) {
    if (pool.free.empty()) {
      pool.all.push_back(std::make_unique<State>());
      pool.free.reserve(pool.all.size());
      return pool.all.back().get();
    }
    State* s = pool.free.back();
    pool.free.pop_back();
    return s;
  }
  /// Under the lock: back to the pool, cleared (which drops a kept exception).
  template <class State>
  static void release(state_pool<State>& pool, State* s) noexcept {
    *s = State{};
    pool.free.push_back(s);
  }
  template <class List, class State>
  static void erase(List& list, State* s) noexcept {
    const auto it = std::find(list.begin(), list.end(), s);
    if (it != list.end()) list.erase(it);
  }

  /// Maps the node's segment (collective) and constructs the headers of this rank's inbox.
  void map_segment() {
    base_ = detail::shm::map_team_segment(*boot_, layout_.total);
    // Each rank constructs the headers of its own inbox (the segment starts zeroed).
    if (rank_ == 0) new (base_) detail::shm::control();
    new (base_ + layout_.identity_offset(rank_)) detail::shm::identity{
        static_cast<std::int64_t>(getpid()), reinterpret_cast<std::uint64_t>(&probe_)};
    for (int sender = 0; sender < size_; ++sender)
      for (std::size_t l = 0; l < options_.lanes; ++l) {
        new (base_ + layout_.lane_offset(rank_, sender, l)) detail::shm::lane_header();
        for (std::size_t s = 0; s < options_.slots; ++s)
          new (base_ + layout_.slot_offset(rank_, sender, l, s)) detail::shm::slot_header();
      }
    area_.emplace(base_, layout_, options_, rank_, size_, spin_allowed_, context_);
    detail::bootstrap::barrier(*boot_);
  }

  shm_options options_;
  detail::shm::layout layout_;
  std::unique_ptr<tcoll::bootstrap> boot_; ///< the team's set-up channel, for `allocate`
  int rank_ = 0, size_ = 1;
  bool spin_allowed_ = true;
  bool single_copy_ = false;
  static constexpr std::uint64_t probe_value = 0x7c011'5a3e'c0b1ULL;
  std::uint64_t probe_ = probe_value; ///< read by the other ranks' single-copy probe
  unsigned char* base_ = nullptr;
  std::optional<shm_segment_area> area_;
  mutable std::mutex mutex_; ///< this process's bookkeeping (engine thread and callers share it)
  /// Registered regions, by id (the order of `allocate` calls, the same on every rank):
  /// each rank's mapping in this process (this rank's own entry is empty: its buffer owns it).
  std::vector<std::vector<std::shared_ptr<detail::shm::mapping>>> regions_;
  std::vector<detail::shm::own_region> own_regions_;
  std::uint64_t registered_messages_ = 0;
  std::uint64_t single_copy_messages_ = 0;
  std::vector<std::uint64_t> sent_count_;       ///< per peer: messages posted so far
  std::vector<std::uint64_t> claimed_;          ///< per (peer, lane): message this rank claimed
  std::vector<std::uint64_t> observed_;         ///< per peer: messages 1..n all seen in a lane
  std::vector<std::vector<send_state*>> sends_; ///< per peer, in posting order
  std::vector<std::vector<recv_state*>> recvs_;
  state_pool<send_state> send_states_;
  state_pool<recv_state> recv_states_;
  collective_context context_; // last: destroyed first
};

static_assert(check_transport<shm_transport>());

} // namespace tcoll
