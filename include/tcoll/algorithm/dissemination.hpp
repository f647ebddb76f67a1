#pragma once
/// \file
/// Dissemination barrier (Hensgen, Finkel and Manber 1988; MPICH's and Open MPI's default
/// for small groups): in round k = 0, 1, ... while 2^k < P, rank r sends a one-byte token
/// to r + 2^k and waits for the one of r - 2^k (mod P). After round k a rank has heard,
/// directly or through others, from the 2^(k+1) - 1 ranks before it, so after ceil(log2 P)
/// rounds from every rank: no rank leaves before every rank has arrived. Any P, no root.
#include <string_view>

#include "../core/collective_table.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/traffic.hpp"
#include "../detail/executor.hpp"

namespace tcoll {

/// See the file comment.
struct dissemination {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "dissemination";

  /// The busiest rank's traffic (core/traffic.hpp) as a barrier: ceil(lg P) full-duplex
  /// rounds of one byte (`bytes` is not read).
  static constexpr rank_traffic traffic(collective, double, int ranks) noexcept {
    if (ranks <= 1) return {};
    const double rounds = detail::ceil_log2(static_cast<std::uint64_t>(ranks));
    return {rounds, rounds, rounds, rounds, 0.0, rounds, rounds};
  }

  /// The barrier in the message space `tag`; every wait is bounded by the transport's
  /// timeout (a rank that never arrives is a `timeout_error` naming the peer waited for).
  /// The tokens live where `red` keeps its memory (`allocate`: device memory for a device
  /// reducer, which a transport such as NCCL needs). On a stream-ordered transport a
  /// completed request means enqueued, not arrived, so the barrier ends with
  /// `red.synchronize()`: it returns once the tokens have crossed, which also waits for the
  /// work this rank enqueued before (as PyTorch's NCCL barrier does).
  template <transport Tr, reducer R>
  void barrier(Tr& t, int tag, R& red) const {
    const int P = t.size(), r = t.rank();
    if (P == 1) return;
    // the token's value is never read; host memory needs no allocation
    unsigned char host_tokens[2] = {0, 1};
    constexpr bool host = detail::reducer_uses_host_memory<R>();
    auto device_tokens = red.template allocate<unsigned char>(host ? 0 : 2);
    unsigned char* tokens = host ? host_tokens : device_tokens.data();
    for (int k = 1; k < P; k *= 2) {
      auto rr = t.irecv((r - k + P) % P, tokens, 1, tag);
      auto sr = t.isend((r + k) % P, tokens + 1, 1, tag);
      const auto until = clock::now() + t.timeout();
      t.wait(rr, until);
      t.wait(sr, until);
    }
    if constexpr (transport_is_stream_ordered<Tr>()) red.synchronize();
  }
};

} // namespace tcoll
