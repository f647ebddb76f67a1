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

namespace tcoll {

/// See the file comment.
struct dissemination {
  /// Its line in the table of collectives (core/collective_table.hpp).
  static constexpr algorithm_id id = algorithm_id::dissemination;
  static constexpr std::string_view name = to_string(id);

  /// The barrier in the message space `tag`; every wait is bounded by the transport's
  /// timeout (a rank that never arrives is a `timeout_error` naming the peer waited for).
  template <transport Tr>
  void barrier(Tr& t, int tag) const {
    const int P = t.size(), r = t.rank();
    unsigned char out = 1, in = 0;
    for (int k = 1; k < P; k *= 2) {
      auto rr = t.irecv((r - k + P) % P, &in, 1, tag);
      auto sr = t.isend((r + k) % P, &out, 1, tag);
      const auto until = clock::now() + t.timeout();
      t.wait(rr, until);
      t.wait(sr, until);
    }
  }
};

} // namespace tcoll
