#pragma once
/// \file
/// Knobs, argument checks, the update rules (MXNET-MPI Eq. 2 and 3) and the rank layout of
/// elastic averaging (`tcoll::elastic`). See docs/elastic.md for every decision.
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/collective_context.hpp"
#include "../core/error.hpp"
#include "../core/tags.hpp"

namespace tcoll::elastic {

/// How the clients average with the center.
enum class mode {
  /// MXNET-MPI: a server rank holds the center; a client's leader pushes its parameters
  /// every `interval` iterations, the server applies Eq. 2 and replies with a center, the
  /// client applies Eq. 3. Clients never wait for each other; the server serves them in
  /// arrival order.
  asynchronous,
  /// For comparison: no server; every `interval` iterations the client leaders allreduce
  /// (average) their parameters, that average is the center, every client applies Eq. 3.
  synchronous,
};

/// Which center the server returns to a client in asynchronous mode (a gap of the paper:
/// Eq. 3 uses w~_t, but the server has just computed w~_{t+1} from this client's push).
enum class center_reply {
  /// The center before this push's Eq. 2 (w~_t): Eq. 2 and 3 use the same difference
  /// w - w~_t, so the pair moves symmetrically and w + w~ is conserved (default).
  before_update,
  /// The center after this push's Eq. 2 (w~_{t+1}): the client moves toward a center that
  /// already includes its own contribution.
  after_update,
};

/// What a client pushes (a gap of the paper: Fig. 4's push allreduces, i.e. sums, the
/// parameters of every worker of the client before rank 0 pushes).
enum class push_source {
  /// The leader's own copy (default): synchronous SGD inside the client keeps every
  /// worker's copy bitwise identical, so it equals every worker's copy and costs nothing.
  leader,
  /// The average over the client's workers (one allreduce inside the client first), for
  /// codes whose in-client replicas may differ.
  client_average,
};

/// Knobs of elastic averaging. Every rank of the job (server and clients) passes the same.
struct options {
  /// Number of client groups C (>= 1). Asynchronous: the ranks other than the server are
  /// cut into C consecutive blocks of sizes floor/ceil(W / C) (W = size - 1); synchronous:
  /// all ranks are.
  int clients = 2;
  /// Iterations between two exchanges of a client (>= 1). MXNET-MPI uses 64.
  int interval = 64;
  /// Elastic moving rate alpha in (0, 1]. Unset: 0.9 / clients (Zhang et al.'s beta = 0.9
  /// shared by the clients; MXNET-MPI gives no value).
  std::optional<double> alpha;
  /// Asynchronous (server) or synchronous (allreduce among the leaders).
  mode variant = mode::asynchronous;
  /// Rank of the server in asynchronous mode (it trains nothing).
  int server_rank = 0;
  /// Which center the server returns (asynchronous mode).
  center_reply reply = center_reply::before_update;
  /// What a client pushes.
  push_source push = push_source::leader;
  /// Exchange at iteration 0 too (Fig. 8: `iter % INTERVAL == 0`, iter starting at 0).
  /// With a common initialisation this first exchange changes nothing but checks that the
  /// server is there.
  bool exchange_at_start = true;
  /// Server: how long it waits for a client's next message (counted from its last reply to
  /// that client, or from the start) before dropping that client. 0: the transport's
  /// timeout. Must exceed the time a client needs for `interval` iterations.
  std::chrono::milliseconds client_timeout{0};
  /// Client leader: how long it waits for the server's reply. 0: the transport's timeout.
  std::chrono::milliseconds server_timeout{0};
  /// Server: sleep after `spin_polls` fruitless polling sweeps (0: only yield).
  std::chrono::microseconds idle_sleep{100};
  /// Server: fruitless sweeps before it starts sleeping.
  int spin_polls = 64;
  /// Point-to-point tag of pushes; replies use `tag + 1`. Both must lie below
  /// `tags::collectives_first` (tags there belong to collectives; `core/tags.hpp`).
  int tag = tags::elastic_push;
  /// Where the server's notices go (a dropped client); unset: stderr.
  std::function<void(std::string_view)> log;
};

/// alpha of `o` (its default when unset).
inline double alpha_of(const options& o) {
  return o.alpha ? *o.alpha : 0.9 / (o.clients > 0 ? o.clients : 1);
}

/// Throws `tcoll::invalid_argument` naming the argument and `rank` for any bad knob of `o`
/// on a job of `world_size` ranks.
inline void validate(const options& o, int world_size, int rank) {
  auto bad = [&](const std::string& what) {
    throw invalid_argument("elastic::options: " + what, rank);
  };
  if (o.clients < 1) bad("clients must be >= 1, got " + std::to_string(o.clients));
  if (o.interval < 1) bad("interval must be >= 1, got " + std::to_string(o.interval));
  const double a = alpha_of(o);
  if (!(a > 0.0 && a <= 1.0)) bad("alpha must be in (0, 1], got " + std::to_string(a));
  if (o.client_timeout.count() < 0)
    bad("client_timeout must be >= 0 ms, got " + std::to_string(o.client_timeout.count()));
  if (o.server_timeout.count() < 0)
    bad("server_timeout must be >= 0 ms, got " + std::to_string(o.server_timeout.count()));
  if (o.idle_sleep.count() < 0)
    bad("idle_sleep must be >= 0 us, got " + std::to_string(o.idle_sleep.count()));
  if (o.spin_polls < 0) bad("spin_polls must be >= 0, got " + std::to_string(o.spin_polls));
  if (o.tag < 0 || o.tag + 1 >= tags::collectives_first)
    bad("tag must be in [0, " + std::to_string(tags::collectives_first - 1) +
        ") (tag + 1 carries the replies), got " + std::to_string(o.tag));
  if (o.variant == mode::asynchronous) {
    if (o.server_rank < 0 || o.server_rank >= world_size)
      bad("server_rank " + std::to_string(o.server_rank) + " is outside [0, " +
          std::to_string(world_size) + ")");
    if (o.clients > world_size - 1)
      bad("clients " + std::to_string(o.clients) + " need at least " +
          std::to_string(o.clients + 1) + " ranks (one server and one per client), the job has " +
          std::to_string(world_size));
  } else if (o.clients > world_size) {
    bad("clients " + std::to_string(o.clients) + " exceed the " + std::to_string(world_size) +
        " ranks of the job");
  }
}

/// Who is what: the server (asynchronous mode) and the client of every rank.
struct layout {
  int world_size = 1;
  int server = -1;               ///< rank of the server; -1 in synchronous mode
  int clients = 1;               ///< number of clients
  std::vector<int> client_of;    ///< per rank: its client, -1 for the server
  std::vector<int> leaders;      ///< per client: its leader (lowest rank)
  std::vector<int> client_sizes; ///< per client: its number of ranks
};

/// The layout of `o` on `world_size` ranks (checks `o` first, naming `rank`).
inline layout make_layout(const options& o, int world_size, int rank) {
  validate(o, world_size, rank);
  layout l;
  l.world_size = world_size;
  l.clients = o.clients;
  l.server = o.variant == mode::asynchronous ? o.server_rank : -1;
  l.client_of.assign(static_cast<std::size_t>(world_size), -1);
  std::vector<int> workers;
  for (int r = 0; r < world_size; ++r)
    if (r != l.server) workers.push_back(r);
  const std::size_t W = workers.size(), C = static_cast<std::size_t>(o.clients);
  l.leaders.assign(C, -1);
  l.client_sizes.assign(C, 0);
  for (std::size_t c = 0; c < C; ++c)
    for (std::size_t i = c * W / C; i < (c + 1) * W / C; ++i) {
      const int r = workers[i];
      l.client_of[static_cast<std::size_t>(r)] = static_cast<int>(c);
      if (l.leaders[c] < 0) l.leaders[c] = r;
      ++l.client_sizes[c];
    }
  return l;
}

/// Eq. 2 (server): center += alpha (w - center), element-wise in T (the difference first,
/// then one multiply and one add).
template <class T>
void center_update(std::span<T> center, std::span<const T> w, T alpha) noexcept {
  static_assert(std::is_floating_point_v<T>);
  for (std::size_t i = 0; i < center.size(); ++i) {
    const T d = w[i] - center[i];
    center[i] = center[i] + alpha * d;
  }
}

/// Eq. 3 (client): w -= alpha (w - center), element-wise in T (same order as Eq. 2).
template <class T>
void client_update(std::span<T> w, std::span<const T> center, T alpha) noexcept {
  static_assert(std::is_floating_point_v<T>);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const T d = w[i] - center[i];
    w[i] = w[i] - alpha * d;
  }
}

namespace detail {

/// Message kinds from a client leader to the server.
enum message_kind : std::uint64_t { push_kind = 1, goodbye_kind = 2 };

/// The header in front of every client message: kind, sequence, count, client.
struct header {
  std::uint64_t kind;
  std::uint64_t sequence;
  std::uint64_t count;
  std::uint64_t client;
};
static_assert(sizeof(header) == 32);

/// Elements of T the header occupies at the front of a message buffer.
template <class T>
constexpr std::size_t header_elements() {
  static_assert(sizeof(header) % sizeof(T) == 0);
  return sizeof(header) / sizeof(T);
}

/// `chosen`, or `fallback` when `chosen` is 0.
inline std::chrono::milliseconds or_default(std::chrono::milliseconds chosen,
                                            std::chrono::milliseconds fallback) {
  return chosen.count() > 0 ? chosen : fallback;
}

} // namespace detail

} // namespace tcoll::elastic
