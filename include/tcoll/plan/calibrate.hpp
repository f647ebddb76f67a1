#pragma once
/// \file
/// Least-squares calibration of the cost models from measured (bytes, time) samples,
/// e.g. the records of `bench/allreduce_perf --json`: the linear model T = a + b M
/// (MG-WFBP Eq. 9), the piecewise log/linear model (OSF Eq. 18) with a given or searched
/// threshold, and the alpha/beta of an algorithm recovered from a linear fit.

#include <algorithm>
#include <span>
#include <stdexcept>
#include <vector>

#include "tcoll/core/error.hpp"
#include "tcoll/plan/cost_model.hpp"
#include "tcoll/plan/interface.hpp"

namespace tcoll::plan {

/// What the residuals are weighted by.
enum class fit_weighting {
  absolute, ///< ordinary least squares on microseconds: large messages dominate
  relative, ///< minimize squared relative error (weight 1/t^2): every size counts alike
};

/// Knobs of the fits.
struct fit_options {
  fit_weighting weighting = fit_weighting::relative;
};

/// How well a model reproduces the samples.
struct fit_error {
  double rms_relative = 0; ///< sqrt(mean((model - measured)^2 / measured^2))
  double max_relative = 0; ///< max |model - measured| / measured
  double rms_us = 0;       ///< sqrt(mean((model - measured)^2))
  std::size_t count = 0;
};

template <cost_model M>
constexpr fit_error evaluate_fit(const M& model, std::span<const sample> samples) {
  fit_error e;
  double sum_rel2 = 0, sum_abs2 = 0;
  for (const auto& s : samples) {
    const double residual = static_cast<double>(model(s.bytes)) - s.time_us;
    const double relative = s.time_us != 0 ? residual / s.time_us : residual;
    sum_rel2 += relative * relative;
    sum_abs2 += residual * residual;
    e.max_relative = std::max(e.max_relative, detail::abs(relative));
    ++e.count;
  }
  if (e.count > 0) {
    e.rms_relative = detail::sqrt(sum_rel2 / e.count);
    e.rms_us = detail::sqrt(sum_abs2 / e.count);
  }
  return e;
}

namespace detail {

/// Weighted least squares y = intercept + slope * x. Returns {intercept, slope}.
/// Needs at least two distinct x values.
struct line {
  double intercept = 0;
  double slope = 0;
};

template <class XOf>
constexpr line weighted_line_fit(std::span<const sample> samples, XOf&& x_of,
                                 fit_weighting weighting) {
  double sw = 0, sx = 0, sy = 0;
  auto weight = [&](const sample& s) {
    return weighting == fit_weighting::relative && s.time_us != 0 ? 1.0 / (s.time_us * s.time_us)
                                                                  : 1.0;
  };
  for (const auto& s : samples) {
    const double w = weight(s);
    sw += w;
    sx += w * x_of(s);
    sy += w * s.time_us;
  }
  if (samples.size() < 2 || !(sw > 0))
    throw tcoll::invalid_argument("least squares: need at least two samples");
  const double mean_x = sx / sw, mean_y = sy / sw;
  double sxx = 0, sxy = 0;
  for (const auto& s : samples) {
    const double w = weight(s), dx = x_of(s) - mean_x;
    sxx += w * dx * dx;
    sxy += w * dx * (s.time_us - mean_y);
  }
  if (!(sxx > 0))
    throw tcoll::invalid_argument("least squares: need at least two distinct message sizes");
  const double slope = sxy / sxx;
  return {mean_y - slope * mean_x, slope};
}

} // namespace detail

/// Fit T(M) = a + b M.
constexpr linear_cost fit_linear(std::span<const sample> samples, fit_options options = {}) {
  const auto l = detail::weighted_line_fit(
      samples, [](const sample& s) { return s.bytes; }, options.weighting);
  return {l.intercept, l.slope};
}

/// Fit OSF Eq. 18 with a fixed threshold: the log part on samples below it, the linear
/// part on the others. Each side needs two distinct sizes.
constexpr piecewise_cost fit_piecewise(std::span<const sample> samples, double threshold_bytes,
                                       fit_options options = {}) {
  std::vector<sample> small, large;
  for (const auto& s : samples) (s.bytes < threshold_bytes ? small : large).push_back(s);
  const auto log_part = detail::weighted_line_fit(
      small, [](const sample& s) { return detail::log2(s.bytes < 1.0 ? 1.0 : s.bytes); },
      options.weighting);
  const auto linear_part = detail::weighted_line_fit(
      large, [](const sample& s) { return s.bytes; }, options.weighting);
  return {log_part.slope, log_part.intercept, linear_part.slope, linear_part.intercept,
          threshold_bytes};
}

/// Fit OSF Eq. 18 choosing the threshold among the measured sizes that minimizes the
/// fit's rms relative error (use when the bandwidth-delay product is unknown).
constexpr piecewise_cost fit_piecewise_auto(std::span<const sample> samples,
                                            fit_options options = {}) {
  std::vector<double> sizes;
  for (const auto& s : samples) sizes.push_back(s.bytes);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.size() < 4)
    throw tcoll::invalid_argument("piecewise fit: need at least four distinct message sizes");
  piecewise_cost best{};
  double best_error = -1;
  for (std::size_t cut = 2; cut + 2 <= sizes.size(); ++cut) {
    const auto candidate = fit_piecewise(samples, sizes[cut], options);
    const double error = evaluate_fit(candidate, samples).rms_relative;
    if (best_error < 0 || error < best_error) {
      best_error = error;
      best = candidate;
    }
  }
  return best;
}

/// Recover a link's alpha and beta from a linear fit of one algorithm at `ranks`,
/// given gamma (the reduction cost per byte, 0 if unknown). The algorithm's cost is
/// c_alpha alpha + M (c_beta beta + c_gamma gamma); the coefficients are read off the
/// cost formula itself, so this works for every flat algorithm and its fold. Throws
/// `tcoll::invalid_argument` for an algorithm with no flat formula
/// (`has_flat_allreduce_cost`).
constexpr link_params link_from_linear_fit(algorithm_id algorithm, int ranks, linear_cost fit,
                                           double gamma_us_per_byte = 0.0) {
  if (!has_flat_allreduce_cost(algorithm))
    throw tcoll::invalid_argument(detail::no_allreduce_formula("link_from_linear_fit", algorithm));
  auto cost = [&](link_params l, double bytes) {
    return allreduce_us(algorithm, bytes, ranks, hierarchy_params{1, l, l});
  };
  const double c_alpha = cost({1, 0, 0}, 0.0);
  const double c_beta = cost({0, 1, 0}, 1.0);
  const double c_gamma = cost({0, 0, 1}, 1.0);
  if (!(c_alpha > 0) || !(c_beta > 0))
    throw tcoll::invalid_argument("link_from_linear_fit: needs ranks >= 2");
  return {fit.startup_us / c_alpha, (fit.per_byte_us - c_gamma * gamma_us_per_byte) / c_beta,
          gamma_us_per_byte};
}

} // namespace tcoll::plan
