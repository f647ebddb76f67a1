#pragma once
/// \file
/// `elastic::client`: one rank of a client group in elastic averaging (MXNET-MPI Sec. 5,
/// Fig. 8, Eq. 3). The group is a `subgroup` of the job's transport (`group()`): the app
/// runs synchronous data-parallel SGD on it with any tcoll collective. Every `interval`
/// iterations `step()` averages elastically:
///  - asynchronous: the leader (lowest rank of the group) sends its parameters to the
///    server, waits (up to `server_timeout`) for the center the server returns, applies
///    Eq. 3 and broadcasts the result inside the group. Clients never wait for each other.
///  - synchronous: the leaders allreduce (average) their parameters; that average is the
///    center; each leader applies Eq. 3 and broadcasts inside its group.
/// All ranks of a group end every exchange with bitwise identical parameters.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../collectives.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../transport/subgroup.hpp"
#include "options.hpp"

namespace tcoll::elastic {

/// One client rank's side of elastic averaging over `count` parameters of type T.
template <transport Tr, class T = float>
class client {
  static_assert(std::is_floating_point_v<T>, "elastic::client: T must be float or double");

public:
  /// Cuts `world` into the server and the client groups of `o` (no communication; every
  /// rank must pass the same options). Throws `invalid_argument` naming the argument and
  /// this rank for bad options, `count` 0, or when this rank is the server.
  client(Tr& world, std::size_t count, options o = {})
      : world_(&world), o_(std::move(o)), layout_(make_layout(o_, world.size(), world.rank())),
        views_(split_groups(world, std::span<const int>(group_ids()))), count_(count),
        alpha_(static_cast<T>(alpha_of(o_))) {
    const int me = world.rank();
    if (count == 0) throw invalid_argument("elastic::client: count must be >= 1, got 0", me);
    id_ = layout_.client_of[static_cast<std::size_t>(me)];
    if (id_ < 0)
      throw invalid_argument("elastic::client: rank " + std::to_string(me) +
                                 " is the server (server_rank); construct an elastic::server "
                                 "there",
                             me);
    center_.resize(count);
    if (leader() && o_.variant == mode::asynchronous)
      message_.resize(detail::header_elements<T>() + count);
  }

  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// The ranks of this client as a transport of their own (for the in-client SGD).
  subgroup<Tr>& group() noexcept { return views_.intra; }
  /// This client's id, 0..clients-1.
  int id() const noexcept { return id_; }
  /// Is this rank its client's leader (the one that talks to the server)?
  bool leader() const noexcept { return views_.local == 0; }
  /// The layout every rank derives from the options.
  const elastic::layout& layout() const noexcept { return layout_; }
  /// alpha in use.
  T alpha() const noexcept { return alpha_; }
  /// Iterations counted by `step()` so far.
  std::uint64_t iterations() const noexcept { return iteration_; }
  /// Exchanges done so far.
  std::uint64_t exchanges() const noexcept { return exchanges_; }
  /// Wall time spent inside exchanges (this rank).
  double exchange_seconds() const noexcept { return exchange_seconds_; }

  /// One iteration (Fig. 8: call it after backward, before the optimizer's update): when
  /// the iteration count is a multiple of `interval` (iteration 0 only with
  /// `exchange_at_start`), averages `params` elastically (see the file comment). Every rank
  /// of the client calls it with the same `count` parameters. Returns true if it exchanged.
  /// Throws `invalid_argument` for a wrong size, `timeout_error` (on every rank of the
  /// client) when the server does not reply within `server_timeout`.
  bool step(std::span<T> params) {
    if (params.size() != count_)
      throw invalid_argument("elastic::client::step: params has " + std::to_string(params.size()) +
                                 " elements, the client was "
                                 "made for count " +
                                 std::to_string(count_),
                             world_->rank());
    if (finished_) throw invalid_argument("elastic::client::step after finish()", world_->rank());
    const std::uint64_t it = iteration_++;
    if (it % static_cast<std::uint64_t>(o_.interval) != 0) return false;
    if (it == 0 && !o_.exchange_at_start) return false;
    const auto t0 = clock::now();
    if (o_.push == push_source::client_average)
      tcoll::allreduce(group(), params.data(), params.data(), count_, avg_op{});
    if (o_.variant == mode::asynchronous)
      exchange_with_server(params);
    else
      exchange_among_leaders(params);
    ++exchanges_;
    exchange_seconds_ += std::chrono::duration<double>(clock::now() - t0).count();
    return true;
  }

  /// Ends this client's part (asynchronous: the leader tells the server, waiting up to
  /// `server_timeout` for the message to be taken). Idempotent; `step` is refused after it.
  /// Without it the server drops the client after `client_timeout`.
  void finish() {
    if (finished_) return;
    finished_ = true;
    if (o_.variant != mode::asynchronous || !leader()) return;
    detail::header h{detail::goodbye_kind, exchanges_, count_, static_cast<std::uint64_t>(id_)};
    std::memcpy(message_.data(), &h, sizeof h);
    auto send = world_->isend(layout_.server, message_.data(), message_.size() * sizeof(T), o_.tag);
    world_->wait(send, clock::now() + server_patience());
  }

private:
  /// Group id of every rank for split_groups: the server alone in group -1.
  std::vector<int> group_ids() const { return layout_.client_of; }

  std::chrono::milliseconds server_patience() const {
    return detail::or_default(o_.server_timeout, world_->timeout());
  }

  void exchange_with_server(std::span<T> params) {
    std::int32_t status = 0;
    std::string failure;
    if (leader()) {
      try {
        ask_server(params);
        client_update<T>(params, center_, alpha_);
      } catch (const timeout_error& e) {
        status = 1;
        failure = e.what();
      } catch (const transport_error& e) {
        status = 2;
        failure = e.what();
      }
    }
    if (group().size() > 1) {
      tcoll::broadcast(group(), &status, 1, 0);
      if (status == 0) tcoll::broadcast(group(), params.data(), count_, 0);
    }
    if (status == 0) return;
    const std::string what =
        "elastic client " + std::to_string(id_) + ": exchange " + std::to_string(exchanges_) +
        " with the server (rank " + std::to_string(layout_.server) + ") failed" +
        (leader() ? ": " + failure
                  : " on the client's leader (rank " +
                        std::to_string(layout_.leaders[static_cast<std::size_t>(id_)]) + ")");
    if (status == 1) throw timeout_error(what, world_->rank(), layout_.server);
    throw transport_error(what, world_->rank(), layout_.server);
  }

  /// Leader: push `params`, receive the center into center_.
  void ask_server(std::span<const T> params) {
    detail::header h{detail::push_kind, exchanges_, count_, static_cast<std::uint64_t>(id_)};
    std::memcpy(message_.data(), &h, sizeof h);
    std::memcpy(message_.data() + detail::header_elements<T>(), params.data(), count_ * sizeof(T));
    const deadline until = clock::now() + server_patience();
    auto recv = world_->irecv(layout_.server, center_.data(), count_ * sizeof(T), o_.tag + 1);
    auto send = world_->isend(layout_.server, message_.data(), message_.size() * sizeof(T), o_.tag);
    bool pushed = false;
    try {
      world_->wait(send, until);
      pushed = true;
      world_->wait(recv, until);
    } catch (const timeout_error&) {
      throw timeout_error("the server (rank " + std::to_string(layout_.server) + ") did not " +
                              (pushed ? "reply" : "take the push") + " within " +
                              std::to_string(server_patience().count()) + " ms (server_timeout)",
                          world_->rank(), layout_.server);
    }
  }

  void exchange_among_leaders(std::span<T> params) {
    if (leader()) {
      auto* leaders = views_.inter_ptr();
      // local index 0 is below every group's size, so every leader has the leaders' view
      tcoll::allreduce(*leaders, params.data(), center_.data(), count_, avg_op{});
      client_update<T>(params, center_, alpha_);
    }
    if (group().size() > 1) tcoll::broadcast(group(), params.data(), count_, 0);
  }

  Tr* world_;
  options o_;
  elastic::layout layout_;
  group_views<Tr> views_;
  std::size_t count_;
  T alpha_;
  int id_ = -1;
  std::vector<T> center_;
  std::vector<T> message_;
  std::uint64_t iteration_ = 0;
  std::uint64_t exchanges_ = 0;
  double exchange_seconds_ = 0.0;
  bool finished_ = false;
};

} // namespace tcoll::elastic
