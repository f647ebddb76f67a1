#pragma once
/// \file
/// `elastic::server`: the rank that holds the center copy in asynchronous elastic averaging
/// (MXNET-MPI Sec. 5, Eq. 2). It keeps one posted receive per live client, polls them in
/// turn and serves every push it finds complete at once: Eq. 2 on the center, then the reply
/// (the center before or after that update, `options::reply`). A client that sends nothing
/// for `client_timeout` (or does not take its reply within it) is dropped with a notice;
/// the others go on. `serve()` returns when every client has said goodbye or was dropped.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "options.hpp"

namespace tcoll::elastic {

/// What happened to one client, seen from the server.
struct client_record {
  int leader = -1;              ///< world rank of the client's leader
  std::uint64_t pushes = 0;     ///< pushes served (Eq. 2 applied)
  bool finished = false;        ///< said goodbye
  bool dropped = false;         ///< dropped after a timeout or a malformed message
  std::string drop_reason;      ///< why it was dropped (empty otherwise)
  std::uint64_t dropped_at = 0; ///< pushes the server had served in all when it dropped it
};

/// What `server::serve()` did.
struct server_report {
  std::vector<client_record> clients; ///< per client
  std::vector<int> service_order;     ///< client of every push served, in service order
  std::uint64_t pushes = 0;           ///< pushes served in all
  double seconds = 0.0;               ///< wall time of serve()
  /// Clients dropped, in increasing id order.
  std::vector<int> dropped() const {
    std::vector<int> out;
    for (std::size_t c = 0; c < clients.size(); ++c)
      if (clients[c].dropped) out.push_back(static_cast<int>(c));
    return out;
  }
  /// Clients that said goodbye, in increasing id order.
  std::vector<int> finished() const {
    std::vector<int> out;
    for (std::size_t c = 0; c < clients.size(); ++c)
      if (clients[c].finished) out.push_back(static_cast<int>(c));
    return out;
  }
};

/// The center copy of `count` elements of T and the loop that serves the clients' pushes.
/// Construct on `options::server_rank` only (asynchronous mode).
template <transport Tr, class T = float>
class server {
  static_assert(std::is_floating_point_v<T>, "elastic::server: T must be float or double");

public:
  /// `initial_center`: the starting center (give it the clients' common initial parameters).
  /// Throws `invalid_argument` (naming the argument and this rank) for bad options, an
  /// empty center, synchronous mode or a rank other than `options::server_rank`.
  server(Tr& world, std::span<const T> initial_center, options o = {})
      : world_(&world), o_(std::move(o)), layout_(make_layout(o_, world.size(), world.rank())),
        center_(initial_center.begin(), initial_center.end()),
        alpha_(static_cast<T>(alpha_of(o_))) {
    const int me = world.rank();
    if (o_.variant != mode::asynchronous)
      throw invalid_argument("elastic::server: synchronous mode has no server", me);
    if (me != o_.server_rank)
      throw invalid_argument("elastic::server: constructed on rank " + std::to_string(me) +
                                 ", but server_rank is " + std::to_string(o_.server_rank),
                             me);
    if (center_.empty())
      throw invalid_argument("elastic::server: initial_center is empty (count must be >= 1)", me);
  }

  /// The center now.
  std::span<const T> center() const noexcept { return center_; }
  /// The layout every rank derives from the options.
  const elastic::layout& layout() const noexcept { return layout_; }

  /// Serves pushes until every client has said goodbye or was dropped. Throws what the
  /// transport throws when the job is aborted; a client's own failure only drops it.
  server_report serve() {
    return serve([](int, std::uint64_t, std::span<const T>) {});
  }
  /// `serve()`, calling `on_push(client, pushes, center)` after every push it serves, once
  /// the reply is on its way: the client just served, the pushes served so far (this one
  /// included) and the center after this push's Eq. 2. For a record of the center over
  /// time (snapshots to evaluate later); the other clients wait while it runs, so keep it
  /// short. What it throws leaves `serve` (the transport is not aborted).
  template <class OnPush>
  server_report serve(OnPush&& on_push) {
    using namespace std::chrono;
    const auto t0 = clock::now();
    const int C = layout_.clients;
    const std::size_t count = center_.size();
    const std::size_t hw = detail::header_elements<T>();
    const milliseconds patience = detail::or_default(o_.client_timeout, world_->timeout());
    std::vector<slot> slots(static_cast<std::size_t>(C));
    server_report report;
    report.clients.resize(static_cast<std::size_t>(C));
    for (int c = 0; c < C; ++c) {
      slot& s = slots[static_cast<std::size_t>(c)];
      s.leader = layout_.leaders[static_cast<std::size_t>(c)];
      s.inbox.resize(hw + count);
      s.outbox.resize(count);
      s.expires = t0 + patience;
      s.recv = world_->irecv(s.leader, s.inbox.data(), s.inbox.size() * sizeof(T), o_.tag);
      report.clients[static_cast<std::size_t>(c)].leader = s.leader;
    }
    int live = C, idle = 0;
    auto drop = [&](int c, const std::string& why) {
      slot& s = slots[static_cast<std::size_t>(c)];
      s.live = false;
      --live;
      s.recv = {}; // cancels the posted receive
      // A reply nobody took: a send cannot be cancelled on every MPI, and destroying it
      // would break the transport for every client; where the transport can, it keeps the
      // send (and its buffer) going instead.
      if constexpr (requires(Tr & t, std::shared_ptr<const void> keep) {
                      t.abandon(std::move(s.reply), keep);
                    }) {
        if (s.reply_pending)
          world_->abandon(std::move(s.reply),
                          std::make_shared<std::vector<T>>(std::move(s.outbox)));
      }
      s.reply = {};
      auto& rec = report.clients[static_cast<std::size_t>(c)];
      rec.dropped = true;
      rec.drop_reason = why;
      rec.dropped_at = report.pushes;
      notice("tcoll elastic server [rank " + std::to_string(world_->rank()) + "]: dropped client " +
             std::to_string(c) + " (leader rank " + std::to_string(s.leader) + ") after " +
             std::to_string(rec.pushes) + " pushes: " + why + "; the other clients go on");
    };
    while (live > 0) {
      bool progress = false;
      for (int c = 0; c < C; ++c) {
        slot& s = slots[static_cast<std::size_t>(c)];
        if (!s.live) continue;
        try {
          if (s.reply_pending && world_->test(s.reply)) {
            s.reply_pending = false;
            progress = true;
          }
          if (!world_->test(s.recv)) continue;
        } catch (const transport_error& e) {
          drop(c, std::string("its message failed: ") + e.what());
          continue;
        } catch (const timeout_error& e) {
          drop(c, std::string("its message failed: ") + e.what());
          continue;
        }
        progress = true;
        detail::header h{};
        std::memcpy(&h, s.inbox.data(), sizeof h);
        if (h.count != count || h.client != static_cast<std::uint64_t>(c) ||
            (h.kind != detail::push_kind && h.kind != detail::goodbye_kind)) {
          drop(c, "malformed message (kind " + std::to_string(h.kind) + ", count " +
                      std::to_string(h.count) + ", client " + std::to_string(h.client) +
                      "; the server expects count " + std::to_string(count) + " and client " +
                      std::to_string(c) + ")");
          continue;
        }
        if (h.kind == detail::goodbye_kind) {
          s.live = false;
          --live;
          report.clients[static_cast<std::size_t>(c)].finished = true;
          if (s.reply_pending) finish_reply(s, c, drop);
          continue;
        }
        if (s.reply_pending && !finish_reply(s, c, drop)) continue;
        serve_push(s, std::span<const T>(s.inbox.data() + hw, count));
        try {
          s.reply = world_->isend(s.leader, s.outbox.data(), count * sizeof(T), o_.tag + 1);
          s.reply_pending = true;
          s.recv = world_->irecv(s.leader, s.inbox.data(), s.inbox.size() * sizeof(T), o_.tag);
        } catch (const transport_error& e) {
          drop(c, std::string("posting its reply failed: ") + e.what());
          continue;
        }
        s.expires = clock::now() + patience;
        auto& rec = report.clients[static_cast<std::size_t>(c)];
        ++rec.pushes;
        ++report.pushes;
        report.service_order.push_back(c);
        on_push(c, report.pushes, std::span<const T>(center_));
      }
      const auto now = clock::now();
      for (int c = 0; c < C; ++c) {
        slot& s = slots[static_cast<std::size_t>(c)];
        if (s.live && now >= s.expires)
          drop(c, std::string(s.reply_pending ? "did not take its reply" : "sent nothing") +
                      " for " + std::to_string(patience.count()) + " ms (client_timeout)");
      }
      if (progress) {
        idle = 0;
      } else if (++idle > o_.spin_polls && o_.idle_sleep.count() > 0) {
        std::this_thread::sleep_for(o_.idle_sleep);
      } else {
        std::this_thread::yield();
      }
    }
    // Replies of finished clients were taken before their goodbye; nothing is left pending.
    report.seconds = duration<double>(clock::now() - t0).count();
    return report;
  }

private:
  struct slot {
    int leader = -1;
    bool live = true;
    bool reply_pending = false;
    std::vector<T> inbox;  // header + parameters
    std::vector<T> outbox; // the center sent back
    typename Tr::request recv;
    typename Tr::request reply;
    deadline expires{};
  };

  /// Waits (until the client's deadline) for the previous reply to complete; drops the
  /// client and returns false if it does not.
  template <class Drop>
  bool finish_reply(slot& s, int c, Drop& drop) {
    try {
      world_->wait(s.reply, s.expires);
      s.reply_pending = false;
      return true;
    } catch (const timeout_error&) {
      drop(c, "did not take its previous reply");
    } catch (const transport_error& e) {
      drop(c, std::string("its reply failed: ") + e.what());
    }
    return false;
  }

  void serve_push(slot& s, std::span<const T> w) {
    if (o_.reply == center_reply::before_update)
      std::copy(center_.begin(), center_.end(), s.outbox.begin());
    center_update<T>(center_, w, alpha_);
    if (o_.reply == center_reply::after_update)
      std::copy(center_.begin(), center_.end(), s.outbox.begin());
  }

  void notice(const std::string& line) const {
    if (o_.log)
      o_.log(line);
    else
      std::fprintf(stderr, "%s\n", line.c_str());
  }

  Tr* world_;
  options o_;
  elastic::layout layout_;
  std::vector<T> center_;
  T alpha_;
};

} // namespace tcoll::elastic
