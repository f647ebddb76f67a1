#pragma once
/// \file
/// Separately started MPI jobs as one elastic-averaging world (MXNET-MPI Sec. 5: every
/// client is its own `mpirun` with its own `MPI_COMM_WORLD`). The server's job opens an MPI
/// port (`MPI_Open_port`) and writes its name to a file; one client job at a time takes the
/// file and connects (`MPI_Comm_connect`). Every arrival is merged into one growing
/// intracommunicator (`MPI_Intercomm_merge`; the jobs already joined accept the next one
/// together), and a final `MPI_Comm_split` orders the ranks job by job: clients in order of
/// arrival, the server's job first or last (`join_options::server_last`). `mpi_transport` on
/// `joined_world::comm` then runs `elastic::server` and `elastic::client` unchanged.
///
/// Open MPI 4 connects two `mpirun`s only through a name server: start `ompi-server
/// --report-uri FILE` once and pass `--ompi-server file:FILE` to every `mpirun`
/// (docs/elastic.md). MPI has no timeout on accept and connect, so a watchdog bounds them:
/// when `join_options::timeout` passes first it prints what it waited for and ends the
/// process (`MPI_Abort` under `MPI_THREAD_MULTIPLE`, else `_Exit`), never a silent hang.
/// End the processes with `finalize_joined` (a barrier, then exit without `MPI_Finalize`,
/// which Open MPI 4.1 does not complete reliably across connected jobs).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include <unistd.h>
#include <vector>

#include "../core/error.hpp"
#include "../detail/mpi_error.hpp"

namespace tcoll::elastic {

/// Knobs of `accept_clients` / `join_server`.
struct join_options {
  /// Longest wait for the port file, and for each accept or connect (then the watchdog
  /// ends the process; see the file comment).
  std::chrono::milliseconds timeout{60000};
  /// Server's job after the clients (the training app's layout: the last rank is the
  /// server) or before them (rank 0 is the server, `options::server_rank`'s default).
  bool server_last = true;
};

/// The communicator of all joined jobs and where this process sits in it.
struct joined_world {
  MPI_Comm comm = MPI_COMM_NULL; ///< every process of every job, ordered job by job
  int clients = 0;               ///< client jobs joined (the server's `clients`)
  int job = -1;                  ///< this process's job: 0..clients-1 by arrival, clients = server
  std::vector<int> job_sizes;    ///< processes per job, indexed like `job`
  std::vector<int> job_first;    ///< rank in `comm` of each job's first process
  /// Size of client job `c` when every client job has the same size, else 0.
  int uniform_client_size() const {
    for (int c = 1; c < clients; ++c)
      if (job_sizes[c] != job_sizes[0]) return 0;
    return clients > 0 ? job_sizes[0] : 0;
  }
};

namespace detail {

/// Ends the process if not cancelled within `limit` (see the file comment): prints
/// `message`, then `MPI_Abort(abort_comm, exit_code)` where that is allowed from this thread
/// (`MPI_THREAD_MULTIPLE` and `abort_comm` not null), else `_Exit(exit_code)`.
class join_watchdog {
public:
  join_watchdog(std::chrono::milliseconds limit, std::string message, int exit_code,
                MPI_Comm abort_comm)
      : message_(std::move(message)), exit_code_(exit_code), comm_(abort_comm) {
    int rank = -1, level = MPI_THREAD_SINGLE;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Query_thread(&level);
    thread_ = std::thread([this, limit, rank, level] {
      std::unique_lock lock(mutex_);
      if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
      std::fprintf(stderr, "tcoll [rank %d of its job]: %s (waited %lld ms)\n", rank,
                   message_.c_str(), static_cast<long long>(limit.count()));
      std::fflush(stderr);
      if (level == MPI_THREAD_MULTIPLE && comm_ != MPI_COMM_NULL) MPI_Abort(comm_, exit_code_);
      std::_Exit(exit_code_);
    });
  }
  ~join_watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  join_watchdog(const join_watchdog&) = delete;
  join_watchdog& operator=(const join_watchdog&) = delete;

private:
  std::string message_;
  int exit_code_;
  MPI_Comm comm_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

inline int rank_of(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}

inline int size_of(MPI_Comm c) {
  int s = 0;
  MPI_Comm_size(c, &s);
  return s;
}

/// Throws `transport_error` naming the call when an MPI call fails.
inline void join_check(int rc, const char* what, int rank) {
  tcoll::detail::mpi::check(rc, std::string("elastic join: ") + what, rank);
}

/// Accepts the next client job on `grown` (collective; the port matters at its rank 0 only,
/// the server's first process) and merges it after the processes already joined.
inline MPI_Comm accept_next(MPI_Comm grown, const char* port, int next, int clients,
                            std::chrono::milliseconds timeout, MPI_Comm local) {
  MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
  {
    join_watchdog dog(timeout,
                      "elastic join: client job " + std::to_string(next + 1) + " of " +
                          std::to_string(clients) + " did not connect",
                      124, local);
    join_check(MPI_Comm_accept(port, MPI_INFO_NULL, 0, grown, &inter), "MPI_Comm_accept",
               rank_of(local));
  }
  join_check(MPI_Intercomm_merge(inter, 0, &merged), "MPI_Intercomm_merge", rank_of(local));
  MPI_Comm_free(&inter);
  return merged;
}

/// Orders the grown communicator job by job, each job in the rank order of its own `local`
/// communicator, and fills `w` (collective over all jobs).
inline void finish_join(MPI_Comm grown, MPI_Comm local, joined_world& w, bool server_last) {
  const int n = size_of(grown);
  const int mine[2] = {w.job, rank_of(local)};
  std::vector<int> all(2 * static_cast<std::size_t>(n));
  MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, grown);
  const auto position = [&](int job) { // the order of jobs in the final communicator
    return server_last ? job : (job == w.clients ? 0 : job + 1);
  };
  MPI_Comm ordered = MPI_COMM_NULL;
  // key: the job's position, then the rank in its job (< n); (clients + 1) n <= n * n fits
  // an int up to 46,340 processes in all
  join_check(MPI_Comm_split(grown, 0, position(w.job) * n + mine[1], &ordered), "MPI_Comm_split",
             mine[1]);
  w.comm = ordered;
  w.job_sizes.assign(static_cast<std::size_t>(w.clients) + 1, 0);
  for (int i = 0; i < n; ++i) ++w.job_sizes[static_cast<std::size_t>(all[2 * i])];
  w.job_first.assign(w.job_sizes.size(), 0);
  int first = 0;
  for (int p = 0; p <= w.clients; ++p)
    for (int j = 0; j <= w.clients; ++j)
      if (position(j) == p) {
        w.job_first[static_cast<std::size_t>(j)] = first;
        first += w.job_sizes[static_cast<std::size_t>(j)];
      }
}

/// Writes `port` to `file` atomically (a temporary file, then a rename); false on failure.
inline bool publish_port(const std::string& file, const char* port) {
  const std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp);
    if (!(out << port << '\n')) return false;
  }
  return std::rename(tmp.c_str(), file.c_str()) == 0;
}

/// Takes the published port away from `file` (a rename to a name of this process, so of
/// several waiting client jobs exactly one connects at a time) and reads it into `port`;
/// false when no port appears before `until`.
inline bool claim_port(const std::string& file, char* port,
                       std::chrono::steady_clock::time_point until) {
  char host[256] = "host";
  int host_length = 0;
  MPI_Get_processor_name(host, &host_length);
  const std::string claimed = file + ".claimed." + std::string(host, host_length) + "." +
                              std::to_string(static_cast<long long>(::getpid()));
  for (;;) {
    if (std::rename(file.c_str(), claimed.c_str()) == 0) {
      std::string line;
      {
        std::ifstream in(claimed);
        std::getline(in, line);
      }
      std::remove(claimed.c_str());
      line.copy(port, std::min<std::size_t>(line.size(), MPI_MAX_PORT_NAME - 1));
      return !line.empty();
    }
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

} // namespace detail

/// Server side, collective over the server's job `local` (usually `MPI_COMM_WORLD`): opens a
/// port and accepts `clients` client jobs one after the other, returning the joined world.
/// Before each accept it writes the port's name to `port_file` (atomically: a temporary file,
/// then a rename); the client job that connects takes the file away (`join_server`), so
/// client jobs connect one at a time (concurrent connects to one port hung Open MPI 4.1 now
/// and then). Throws `invalid_argument` for `clients` < 1 or an unwritable file,
/// `transport_error` when an MPI call fails.
inline joined_world accept_clients(MPI_Comm local, const std::string& port_file, int clients,
                                   join_options o = {}) {
  const int me = detail::rank_of(local);
  if (clients < 1)
    throw invalid_argument(
        "elastic::accept_clients: clients = " + std::to_string(clients) + " (at least 1)", me);
  char port[MPI_MAX_PORT_NAME] = {};
  // 1: port open; -1: MPI_Open_port failed (every rank learns it and all throw together)
  int opened = 1;
  if (me == 0) opened = MPI_Open_port(MPI_INFO_NULL, port) == MPI_SUCCESS ? 1 : -1;
  MPI_Bcast(&opened, 1, MPI_INT, 0, local);
  if (opened < 0) throw transport_error("elastic::accept_clients: MPI_Open_port failed", me);
  MPI_Comm grown = MPI_COMM_NULL;
  MPI_Comm_dup(local, &grown);
  for (int joined = 0; joined < clients;) {
    // the next client job may connect now (the server's first process is rank 0 of grown)
    int written = detail::rank_of(grown) == 0 ? detail::publish_port(port_file, port) : 1;
    MPI_Bcast(&written, 1, MPI_INT, 0, grown);
    if (!written) {
      if (me == 0) MPI_Close_port(port);
      // the client jobs already joined throw too (they take part in the broadcast)
      throw invalid_argument(
          "elastic::accept_clients: port_file '" + port_file + "' could not be written", me);
    }
    MPI_Comm merged = detail::accept_next(grown, port, joined, clients, o.timeout, local);
    MPI_Comm_free(&grown);
    grown = merged;
    ++joined;
    int state[2] = {joined, clients};
    MPI_Bcast(state, 2, MPI_INT, 0, grown); // tells the newest job its number and the total
  }
  if (me == 0) MPI_Close_port(port); // the last client job took the port file
  joined_world w;
  w.clients = clients;
  w.job = clients;
  detail::finish_join(grown, local, w, o.server_last);
  MPI_Comm_free(&grown);
  return w;
}

/// Client side, collective over one client job `local` (usually its `MPI_COMM_WORLD`): waits
/// for `port_file` and takes it (up to `join_options::timeout`, then `timeout_error`),
/// connects, takes part in accepting the client jobs after it and returns the joined world.
/// The number of clients is the server's (`joined_world::clients`).
inline joined_world join_server(MPI_Comm local, const std::string& port_file, join_options o = {}) {
  const int me = detail::rank_of(local);
  char port[MPI_MAX_PORT_NAME] = {};
  int found = 1;
  if (me == 0)
    found = detail::claim_port(port_file, port, std::chrono::steady_clock::now() + o.timeout);
  MPI_Bcast(&found, 1, MPI_INT, 0, local);
  if (!found)
    throw timeout_error("elastic::join_server: port_file '" + port_file +
                            "' did not appear within " + std::to_string(o.timeout.count()) +
                            " ms (is the server's job running?)",
                        me);
  MPI_Comm inter = MPI_COMM_NULL, grown = MPI_COMM_NULL;
  {
    detail::join_watchdog dog(
        o.timeout, "elastic join: the server's job did not accept (port from " + port_file + ")",
        124, local);
    detail::join_check(MPI_Comm_connect(port, MPI_INFO_NULL, 0, local, &inter), "MPI_Comm_connect",
                       me);
  }
  detail::join_check(MPI_Intercomm_merge(inter, 1, &grown), "MPI_Intercomm_merge", me);
  MPI_Comm_free(&inter);
  int state[2] = {0, 0};
  MPI_Bcast(state, 2, MPI_INT, 0, grown);
  joined_world w;
  w.job = state[0] - 1;
  w.clients = state[1];
  for (int joined = state[0]; joined < w.clients;) {
    int written = 1; // the server's first process publishes the port for the next job
    MPI_Bcast(&written, 1, MPI_INT, 0, grown);
    if (!written)
      throw invalid_argument("elastic::join_server: the server could not write port_file '" +
                                 port_file + "' for the next client job",
                             me);
    MPI_Comm merged = detail::accept_next(grown, port, joined, w.clients, o.timeout, local);
    MPI_Comm_free(&grown);
    grown = merged;
    MPI_Bcast(state, 2, MPI_INT, 0, grown);
    joined = state[0];
  }
  detail::finish_join(grown, local, w, o.server_last);
  MPI_Comm_free(&grown);
  return w;
}

/// Ends the process with `exit_code` (the caller's verdict, agreed on every rank before):
/// a barrier over `w.comm` (bounded by `timeout`), stdio flushed, then `_Exit` without
/// `MPI_Finalize`. Open MPI 4.1 does not tear connected jobs down reliably: its
/// `MPI_Finalize` disconnects every communicator still connecting the jobs, opening TCP
/// connections to processes of other jobs that may have exited already ("failed to TCP
/// connect"), and waits for them, hanging in some runs also without any failure; once its
/// runtime crashed forwarding that warning between the jobs. After the barrier no process
/// sends anything, so leaving without the handshake is safe. Run `mpirun` with `--mca
/// orte_allowed_exit_without_sync 1`, or it reports the job as failed. Never returns.
[[noreturn]] inline void
finalize_joined(joined_world& w, int exit_code,
                std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  if (w.comm != MPI_COMM_NULL) {
    detail::join_watchdog dog(timeout, "elastic join: the final barrier of the joined jobs",
                              exit_code == 0 ? 124 : exit_code, MPI_COMM_NULL);
    MPI_Barrier(w.comm);
  }
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

} // namespace tcoll::elastic
