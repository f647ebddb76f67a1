#pragma once
/// \file
/// `calibrate_gemm_us`: measures what one multiply-add of the sufficient-factor
/// reconstruction costs, for `sfb_costs::gemm_us_per_multiply_add` (best_scheme.hpp).
/// Poseidon calls the reconstruction "often negligible compared to communication" (POS
/// L135), which holds on fast GEMMs and slow links; on a host GEMM and a fast link it is not,
/// and a plan that ignores it sends layers by SFB that are faster dense.
///
/// Every rank times the same GEMM at the same moment (they start after a barrier), so
/// ranks that share cores measure the rate they will get while the others compute too. The
/// result is the slowest rank's, agreed by an allreduce: a plan made from it is identical on
/// every rank (a plan that differed between ranks would mismatch their collectives).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "../collectives.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "gemm.hpp"

namespace tcoll::hybrid {

/// The GEMM `calibrate_gemm_us` times: G (M x N) = U^T V over `rows` rows (for a layer's
/// reconstruction, rows = P*K: every rank's K samples).
struct gemm_calibration {
  std::size_t rows = 128; ///< rows of U and V (P*K of the reconstruction to model)
  std::size_t M = 512;    ///< rows of G (length of u)
  std::size_t N = 256;    ///< columns of G (length of v)
  int repetitions = 3;    ///< timed GEMMs after one untimed warm-up; the median counts
};

/// Microseconds per multiply-add of `gemm` on a `c.rows` x `c.M` x `c.N` product, measured on
/// every rank of `t` at once; returns the largest rank's figure on every rank (a collective:
/// every rank calls it with the same `c`). Throws `tcoll::invalid_argument` naming the
/// argument and the rank for a zero dimension or fewer than one repetition.
template <transport Tr, class Gemm = host_gemm>
requires gemm_policy<const Gemm, float>
double calibrate_gemm_us(Tr& t, const Gemm& gemm = {}, const gemm_calibration& c = {}) {
  const auto check = [&](std::size_t v, const char* name) {
    if (v == 0)
      throw invalid_argument(std::string("calibrate_gemm_us: ") + name + " is 0", t.rank());
  };
  check(c.rows, "rows");
  check(c.M, "M");
  check(c.N, "N");
  if (c.repetitions < 1)
    throw invalid_argument("calibrate_gemm_us: repetitions is " + std::to_string(c.repetitions) +
                               " but must be at least 1",
                           t.rank());
  // Fractional inputs of either sign: no denormals, no early-out a GEMM could take on zeros.
  std::vector<float> U(c.rows * c.M), V(c.rows * c.N), G(c.M * c.N);
  for (std::size_t i = 0; i < U.size(); ++i) U[i] = static_cast<float>(i % 97) / 97.0f - 0.5f;
  for (std::size_t i = 0; i < V.size(); ++i) V[i] = static_cast<float>(i % 89) / 89.0f - 0.25f;
  gemm.sum_outer_products(U.data(), V.data(), c.rows, c.M, c.N, G.data()); // warm-up
  int start = 0;
  allreduce(t, &start, &start, 1, max_op{}); // a barrier: every rank times at the same moment
  std::vector<double> us(static_cast<std::size_t>(c.repetitions));
  for (double& u : us) {
    const auto t0 = std::chrono::steady_clock::now();
    gemm.sum_outer_products(U.data(), V.data(), c.rows, c.M, c.N, G.data());
    u = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(us.size() / 2), us.end());
  double per_multiply_add =
      us[us.size() / 2] /
      (static_cast<double>(c.rows) * static_cast<double>(c.M) * static_cast<double>(c.N));
  allreduce(t, &per_multiply_add, &per_multiply_add, 1, max_op{});
  return per_multiply_add;
}

} // namespace tcoll::hybrid
