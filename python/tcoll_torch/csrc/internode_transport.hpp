#pragma once
// `internode_transport`: the backend's transport between nodes, picked when a group is made.
// Under an MPI launcher (`mpirun`, `mpiexec`, `srun` with PMIx) and with the extension built
// against MPI, it is `tcoll::mpi_transport` over a communicator of the group's ranks;
// otherwise `c10d_transport` over a Gloo process group (TCOLL_TORCH_INTERNODE chooses; see
// mpi_link.hpp). One type for both keeps one instantiation of every collective in the
// extension: the choice is a pointer test per message, not a second copy of the algorithms.
#include <memory>
#include <string_view>
#include <utility>
#include <variant>

#include <tcoll/core/collective_context.hpp>
#include <tcoll/core/concepts.hpp>
#include <tcoll/core/error.hpp>

#include "c10d_transport.hpp"

#ifdef TCOLL_TORCH_MPI
#include <tcoll/transport/mpi.hpp>
#endif

namespace tcoll_torch {

#ifdef TCOLL_TORCH_MPI
using internode_mpi = tcoll::mpi_transport;
#else
/// Without MPI in the build there is no MPI engine; the placeholder is never made.
struct internode_mpi {};
#endif

/// See the file comment. Not copyable; what it carries its messages over (the Gloo group or
/// the MPI communicator) stays with it.
class internode_transport {
public:
  static constexpr bool zero_copy = false;
  static constexpr std::string_view name = "internode";

  /// A pending transfer of whichever engine the transport runs on.
  class request {
  public:
    request() = default;

  private:
    friend class internode_transport;
#ifdef TCOLL_TORCH_MPI
    std::variant<c10d_transport::request, tcoll::mpi_transport::request> r_;
#else
    std::variant<c10d_transport::request> r_;
#endif
  };

private:
  // before their users: their return types are deduced
  /// Calls `f` with the engine transport.
  template <class F>
  decltype(auto) visit_transport(F&& f) {
#ifdef TCOLL_TORCH_MPI
    if (mpi_) return f(*mpi_);
#endif
    return f(*gloo_);
  }
  template <class F>
  request wrap(F&& f) {
    request r;
    visit_transport([&](auto& t) { r.r_ = f(t); });
    return r;
  }
  /// `r` as a request of `t`'s type (made by this transport, so it is one).
  template <class T>
  static typename T::request& own(T&, request& r) {
    auto* mine = std::get_if<typename T::request>(&r.r_);
    if (!mine) throw tcoll::invalid_argument("internode_transport: a request of another transport");
    return *mine;
  }

public:
  explicit internode_transport(std::unique_ptr<c10d_transport> over_gloo)
      : gloo_(std::move(over_gloo)) {}
#ifdef TCOLL_TORCH_MPI
  explicit internode_transport(std::unique_ptr<tcoll::mpi_transport> over_mpi)
      : mpi_(std::move(over_mpi)) {}
#endif
  internode_transport(const internode_transport&) = delete;
  internode_transport& operator=(const internode_transport&) = delete;

  /// "mpi" or "gloo": what the messages travel over.
  std::string_view engine() const noexcept {
    return mpi_ ? "mpi" : "gloo";
  }

  /// The collectives' state is the engine transport's own (its tag range fits MPI_TAG_UB; a
  /// failed collective marks the communicator that MPI must not free).
  tcoll::collective_context& collectives() noexcept {
    return visit_transport([](auto& t) -> tcoll::collective_context& { return t.collectives(); });
  }
  int rank() const noexcept {
    return const_cast<internode_transport*>(this)->visit_transport(
        [](auto& t) { return t.rank(); });
  }
  int size() const noexcept {
    return const_cast<internode_transport*>(this)->visit_transport(
        [](auto& t) { return t.size(); });
  }
  std::chrono::milliseconds timeout() const noexcept {
    return const_cast<internode_transport*>(this)->visit_transport(
        [](auto& t) { return t.timeout(); });
  }
  /// The communication engine thread calls MPI beside the caller's: MPI must run at
  /// MPI_THREAD_MULTIPLE (mpi_link.hpp initialises it so).
  void check_concurrent_use() const {
#ifdef TCOLL_TORCH_MPI
    if (mpi_) mpi_->check_concurrent_use();
#endif
  }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    return wrap([&](auto& t) { return t.isend(peer, data, bytes, tag); });
  }
  request irecv(int peer, void* data, std::size_t bytes, int tag) {
    return wrap([&](auto& t) { return t.irecv(peer, data, bytes, tag); });
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, tcoll::consumer use, void* staging) {
    return wrap([&](auto& t) { return t.irecv_consume(peer, bytes, tag, use, staging); });
  }
  /// Whether a message from `peer` with `tag` waits (see shm_transport::probe): on MPI only;
  /// Gloo's send/recv cannot be probed, so a receive of any source across nodes needs MPI.
  bool probe(int peer, int tag) {
#ifdef TCOLL_TORCH_MPI
    if (mpi_) return mpi_->probe(peer, tag);
#endif
    throw tcoll::invalid_argument(
        "a receive from any source across nodes needs the MPI engine (run under an MPI "
        "launcher with TCOLL_TORCH_INTERNODE=mpi); Gloo's send/recv cannot be probed",
        rank(), peer);
  }
  bool test(request& r) {
    return visit_transport([&](auto& t) { return t.test(own(t, r)); });
  }
  void wait(request& r, tcoll::deadline when) {
    visit_transport([&](auto& t) { t.wait(own(t, r), when); });
  }
  void abort() noexcept {
    if (gloo_) gloo_->abort();
#ifdef TCOLL_TORCH_MPI
    if (mpi_) mpi_->abort();
#endif
  }

private:
  std::unique_ptr<c10d_transport> gloo_;
  std::unique_ptr<internode_mpi> mpi_;
};

static_assert(tcoll::check_transport<internode_transport>());

} // namespace tcoll_torch
