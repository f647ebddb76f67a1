#pragma once
/// \file
/// The fine-grained baseline CSC is compared with (GF Sec. 3.2's "FCS", DGC-style top-k):
/// each rank selects its own `k` elements of largest magnitude, the ranks allgather their
/// (index, value) pairs (ring allgather, P k pairs in all) and every rank sums them into a
/// dense output, rank by rank in rank order, so every rank ends with bitwise identical
/// results. Elements no rank selected are zero in the output. Optionally the unsent part
/// is kept as a plain error-feedback residual (residual = input off the selection, 0 on it).
///
/// `dgc_allreduce` adds DGC's momentum correction and momentum factor masking around it
/// (velocity and accumulation kept by the caller; see there).
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

namespace detail {

/// The argument checks `topk_allreduce` and `dgc_allreduce` share.
template <class Index, class Tr, class T>
void check_topk_args(Tr& t, const T* input, const T* output, std::size_t count, std::size_t k,
                     const char* what) {
  const int rank = t.rank();
  static_assert(std::is_unsigned_v<Index>, "tcoll: the index type must be unsigned");
  if (k > count)
    throw invalid_argument(std::string(what) + ": k (" + std::to_string(k) +
                               ") is larger than count (" + std::to_string(count) + ")",
                           rank);
  if (count > 0 && count - 1 > std::numeric_limits<Index>::max())
    throw invalid_argument(std::string(what) + ": count " + std::to_string(count) +
                               " does not fit the index type (use a wider Index)",
                           rank);
  if (count && (!input || !output))
    throw invalid_argument(std::string(what) + ": " + (!input ? "input" : "output") + " is null",
                           rank);
  if (count) { // host code reads and writes them (one driver query each; memory_kind.hpp)
    tcoll::detail::require_memory(input, true, what, "input", rank);
    tcoll::detail::require_memory(output, true, what, "output", rank);
  }
}

/// Calls visit(i, take) for i = 0..count-1 in index order, `take` for the k elements of
/// largest magnitude (ties to the lower index, NaN largest).
template <class T, class Visit>
void select_topk(const T* input, std::size_t count, std::size_t k, Visit&& visit) {
  using A = accumulator_t<T>;
  // The k-th largest magnitude comes from nth_element over a copy of the magnitudes
  // (sequential memory access; nth_element over indices with an indirect comparator was
  // 2-3x slower on AlexNet's pool), then one pass in index order takes every element above
  // it and the lowest-indexed ones equal to it.
  using K = std::conditional_t<std::is_same_v<A, float>, float, double>;
  auto key = [&](std::size_t i) {
    const K v = std::fabs(static_cast<K>(static_cast<A>(input[i])));
    return std::isnan(v) ? std::numeric_limits<K>::infinity() : v;
  };
  if (k == count) {
    for (std::size_t i = 0; i < count; ++i) visit(i, true);
    return;
  }
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
  for (std::size_t i = 0; i < count; ++i) {
    const K v = k ? key(i) : K{};
    visit(i, k && (v > threshold || (v == threshold && ties && (--ties, true))));
  }
}

/// Sums every rank's pairs `all` (rank by rank, in rank order, so every rank gets the same
/// bits) into `output`, zeroed first.
template <class T, class Index>
void sum_gathered(const std::vector<sparse_entry<T, Index>>& all, T* output, std::size_t count) {
  using A = accumulator_t<T>;
  std::fill(output, output + count, T{});
  for (const auto& e : all)
    output[e.index] = static_cast<T>(static_cast<A>(output[e.index]) + static_cast<A>(e.value));
}

/// Allgathers every rank's selected pairs (ring) and sums them into `output` (zeroed first)
/// rank by rank in rank order.
template <class Index, transport Tr, class T, reducer R>
topk_report sum_selected(Tr& t, const std::vector<sparse_entry<T, Index>>& mine, T* output,
                         std::size_t count, R red) {
  using E = sparse_entry<T, Index>;
  const std::size_t k = mine.size();
  const int P = t.size();
  std::vector<E> all(k * static_cast<std::size_t>(P));
  if (k) tcoll::allgather(t, mine.data(), all.data(), k, ring{}, red);
  sum_gathered(all, output, count);
  return topk_report{k, static_cast<std::size_t>(P - 1) * k * sizeof(E)};
}

/// This rank's k pairs of largest magnitude of `input` into `mine`; `residual` (may be
/// null) receives the input off the selection and 0 on it (error feedback).
template <class T, class Index>
void select_with_residual(const T* input, std::size_t count, std::size_t k, T* residual,
                          std::vector<sparse_entry<T, Index>>& mine) {
  mine.resize(k);
  std::size_t j = 0;
  select_topk(input, count, k, [&](std::size_t i, bool take) {
    if (take) mine[j++] = {static_cast<Index>(i), input[i]};
    if (residual) residual[i] = take ? T{} : input[i];
  });
}

/// DGC's step on this rank (see `dgc_allreduce`): velocity and accumulation updated with
/// `grad`, this rank's k pairs of largest accumulated magnitude into `mine`, and both masked
/// (set to 0) where they were taken.
template <class T, class Index>
void select_dgc(const T* grad, std::size_t count, std::size_t k, T* velocity, T* accumulation,
                double momentum, std::vector<sparse_entry<T, Index>>& mine) {
  using A = accumulator_t<T>;
  const A m = static_cast<A>(momentum);
  for (std::size_t i = 0; i < count; ++i) {
    velocity[i] = static_cast<T>(m * static_cast<A>(velocity[i]) + static_cast<A>(grad[i]));
    accumulation[i] = static_cast<T>(static_cast<A>(accumulation[i]) + static_cast<A>(velocity[i]));
  }
  mine.resize(k);
  std::size_t j = 0;
  select_topk(accumulation, count, k, [&](std::size_t i, bool take) {
    if (!take) return;
    mine[j++] = {static_cast<Index>(i), accumulation[i]};
    accumulation[i] = T{};
    velocity[i] = T{};
  });
}

} // namespace detail

/// Top-k sparse allreduce (see the file comment) of `count` elements; `input == output`
/// is allowed. `residual` (may be null) receives the error-feedback residual. Collective:
/// every rank passes the same `count` and `k`.
template <class Index = std::uint32_t, transport Tr, class T, reducer R = cpu_reducer>
topk_report topk_allreduce(Tr& t, const T* input, T* output, std::size_t count, std::size_t k,
                           T* residual = nullptr, R red = {}) {
  detail::check_topk_args<Index>(t, input, output, count, k, "topk_allreduce");
  if (count) tcoll::detail::require_memory(residual, true, "topk_allreduce", "residual", t.rank());
  std::vector<sparse_entry<T, Index>> mine;
  detail::select_with_residual(input, count, k, residual, mine);
  return detail::sum_selected<Index>(t, mine, output, count, std::move(red));
}

/// DGC's momentum correction with momentum factor masking (Lin et al., ICLR 2018, "Deep
/// Gradient Compression", Sec. 3.2) around the top-k allreduce: on this rank
///     u = momentum u + grad        (velocity)
///     v = v + u                    (accumulation)
/// then this rank's k largest |v| go out as in `topk_allreduce` (`output` = their sum over
/// the ranks, identical on every rank), and u and v are set to 0 where this rank's selection
/// took them (masking) and kept elsewhere. The momentum is inside `output`: apply it
/// (divided by P for an average) with plain SGD, not a momentum step. With k = count every
/// element goes out every step and the masking stops all momentum; DGC warms up with
/// densities below 1. `grad == output` is allowed (`output` must not overlap `velocity` or
/// `accumulation`); those two hold `count` elements each (zeros before the first step) and
/// are updated in place.
template <class Index = std::uint32_t, transport Tr, class T, reducer R = cpu_reducer>
topk_report dgc_allreduce(Tr& t, const T* grad, T* output, std::size_t count, std::size_t k,
                          T* velocity, T* accumulation, double momentum, R red = {}) {
  const int rank = t.rank();
  detail::check_topk_args<Index>(t, grad, output, count, k, "dgc_allreduce");
  if (count && (!velocity || !accumulation))
    throw invalid_argument(std::string("dgc_allreduce: ") +
                               (!velocity ? "velocity" : "accumulation") + " is null",
                           rank);
  if (!(momentum >= 0 && momentum < 1))
    throw invalid_argument(
        "dgc_allreduce: momentum " + std::to_string(momentum) + " is outside [0, 1)", rank);
  if (count) {
    tcoll::detail::require_memory(velocity, true, "dgc_allreduce", "velocity", rank);
    tcoll::detail::require_memory(accumulation, true, "dgc_allreduce", "accumulation", rank);
  }
  std::vector<sparse_entry<T, Index>> mine;
  detail::select_dgc(grad, count, k, velocity, accumulation, momentum, mine);
  return detail::sum_selected<Index>(t, mine, output, count, std::move(red));
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
