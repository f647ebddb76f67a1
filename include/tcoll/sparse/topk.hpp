#pragma once
/// \file
/// The fine-grained baseline CSC is compared with (GF Sec. 3.2's "FCS", DGC-style top-k):
/// each rank selects its own `k` elements of largest magnitude, the ranks allgather their
/// (index, value) pairs (ring allgather, P k pairs in all) and every rank sums them into a
/// dense output, rank by rank in rank order, so every rank ends with bitwise identical
/// results. Elements no rank selected are zero in the output. Optionally the unsent part
/// is kept as a plain error-feedback residual (residual = input off the selection, 0 on it).
///
/// Bytes each rank sends: (P - 1) k sizeof(sparse_entry<T, Index>) (ring allgather), against
/// CSC's 2 (P - 1)/P k b for the same k elements on a ring plus its norm vector.
///
/// Choices: ties between equal magnitudes go to the lower index, NaN ranks above every
/// number (as in chunk selection); `k` from a density rounds like `chunks_kept`; the sum is
/// a plain sum (divide by P yourself for an average). Host memory only: a device pointer
/// (found by asking the CUDA driver, when it is loaded) is an `invalid_argument` naming it.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "../collectives.hpp"
#include "../core/error.hpp"
#include "../core/types.hpp"
#include "../detail/memory_kind.hpp"
#include "chunks.hpp"

namespace tcoll::sparse {

/// One (index, value) pair on the wire.
template <class T, class Index = std::uint32_t>
struct sparse_entry {
  Index index;
  T value;
};

/// What one top-k allreduce did on this rank.
struct topk_report {
  std::size_t k = 0;          ///< elements this rank contributed
  std::size_t bytes_sent = 0; ///< bytes this rank sent (ring allgather of the pairs)
};

/// Elements kept at `density` out of `n` (rounded like `chunks_kept`).
inline std::size_t topk_count(double density, std::size_t n) {
  return chunks_kept(density, n);
}

/// Top-k sparse allreduce (see the file comment) of `count` elements; `input == output`
/// is allowed. `residual` (may be null) receives the error-feedback residual. Collective:
/// every rank passes the same `count` and `k`.
template <class Index = std::uint32_t, transport Tr, class T, reducer R = cpu_reducer>
topk_report topk_allreduce(Tr& t, const T* input, T* output, std::size_t count, std::size_t k,
                           T* residual = nullptr, R red = {}) {
  const int rank = t.rank(), P = t.size();
  static_assert(std::is_unsigned_v<Index>, "tcoll: the index type must be unsigned");
  if (k > count)
    throw invalid_argument("topk_allreduce: k (" + std::to_string(k) + ") is larger than count (" +
                               std::to_string(count) + ")",
                           rank);
  if (count > 0 && count - 1 > std::numeric_limits<Index>::max())
    throw invalid_argument("topk_allreduce: count " + std::to_string(count) +
                               " does not fit the index type (use a wider Index)",
                           rank);
  if (count && (!input || !output))
    throw invalid_argument(
        std::string("topk_allreduce: ") + (!input ? "input" : "output") + " is null", rank);
  if (count) { // host code reads and writes all three (one driver query each; memory_kind.hpp)
    tcoll::detail::require_memory(input, true, "topk_allreduce", "input", rank);
    tcoll::detail::require_memory(output, true, "topk_allreduce", "output", rank);
    tcoll::detail::require_memory(residual, true, "topk_allreduce", "residual", rank);
  }
  using E = sparse_entry<T, Index>;
  using A = accumulator_t<T>;
  // local selection: k largest |x|, ties to the lower index, NaN largest. The k-th largest
  // magnitude comes from nth_element over a copy of the magnitudes (sequential memory access;
  // nth_element over indices with an indirect comparator was 2-3x slower on
  // AlexNet's pool), then one pass in index order takes every element above it and the
  // lowest-indexed ones equal to it, so `mine` is in index order.
  using K = std::conditional_t<std::is_same_v<A, float>, float, double>;
  auto key = [&](std::size_t i) {
    const K v = std::fabs(static_cast<K>(static_cast<A>(input[i])));
    return std::isnan(v) ? std::numeric_limits<K>::infinity() : v;
  };
  std::vector<E> mine(k), all(k * static_cast<std::size_t>(P));
  if (k == count) {
    for (std::size_t i = 0; i < count; ++i) mine[i] = E{static_cast<Index>(i), input[i]};
    if (residual) std::fill(residual, residual + count, T{});
  } else {
    K threshold{};
    std::size_t ties = 0; // elements equal to the threshold still to take
    if (k) {
      std::vector<K> mag(count);
      for (std::size_t i = 0; i < count; ++i) mag[i] = key(i);
      const auto kth = mag.begin() + static_cast<std::ptrdiff_t>(k - 1);
      std::nth_element(mag.begin(), kth, mag.end(), std::greater<K>());
      threshold = *kth;
      std::size_t above = 0; // every element above the threshold is in [begin, kth)
      for (auto it = mag.begin(); it != kth; ++it) above += *it > threshold;
      ties = k - above;
    }
    std::size_t j = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const K v = k ? key(i) : K{};
      const bool take = k && (v > threshold || (v == threshold && ties && (--ties, true)));
      if (take) mine[j++] = E{static_cast<Index>(i), input[i]};
      if (residual) residual[i] = take ? T{} : input[i];
    }
  }
  if (k) tcoll::allgather(t, mine.data(), all.data(), k, ring{}, red);
  std::fill(output, output + count, T{});
  for (const E& e : all)
    output[e.index] = static_cast<T>(static_cast<A>(output[e.index]) + static_cast<A>(e.value));
  return topk_report{k, static_cast<std::size_t>(P - 1) * k * sizeof(E)};
}

/// Same with `k = topk_count(density, count)`.
template <class Index = std::uint32_t, transport Tr, class T, reducer R = cpu_reducer>
topk_report topk_allreduce_density(Tr& t, const T* input, T* output, std::size_t count,
                                   double density, T* residual = nullptr, R red = {}) {
  check_density(density, "topk_allreduce: density", t.rank());
  return topk_allreduce<Index>(t, input, output, count, topk_count(density, count), residual,
                               std::move(red));
}

} // namespace tcoll::sparse
