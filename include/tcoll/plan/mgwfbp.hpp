#pragma once
/// \file
/// MG-WFBP (Shi & Chu), Algorithm 1 "Find all merged-gradient layers" as published,
/// with Theorem 1's rule: layer l is merged into layer l-1 when
/// tau_b[l-2] - tau_c[l] < a, where a is the startup cost of one allreduce.
///
/// Index mapping: the paper numbers layers 1..L in forward order, so backward runs
/// L -> 1; our tensor k (backward order, 0-based) is the paper's layer l = L - k.
/// The listing computes tau_b only down to layer 2 (line 9) yet reads tau_b[l-2] for
/// l = 3 and l = 2; we compute tau_b for every layer and take tau_b[0] = tau_b[1] +
/// tb[1], the end of backward ("when layer 0 would start"), which is what tau_b[l-2]
/// means for the other layers: the moment layer l-1's gradients are ready.

#include <vector>

#include "tcoll/plan/bucket_plan.hpp"

namespace tcoll::plan {

/// Tuning knob of MG-WFBP: the startup cost `a` (MG-WFBP Eq. 9). Negative means
/// "take it from the cost model", T(0).
struct mgwfbp_options {
  double startup_us = -1.0;
};

namespace detail {

/// Algorithm 1. With `incremental` false this is the listing verbatim: after every
/// merge CALCULATECOMMSTART recomputes all tau_c, O(L^2) in all. Before the next
/// recompute the loop only reads tau_c[l-1], and tau_c[l'] depends only on
/// tau_c[l'+1], tc[l'+1], tau_b[l'] and tb[l'], which no later step changes once the
/// loop has passed layer l'+1. So computing tau_c[l] right before step l reads it
/// yields the listing's values in O(L) total (`incremental` true, what the planner
/// uses); tests/plan checks that both forms return the same plan.
template <cost_model Cost>
constexpr bucket_plan mgwfbp_algorithm1(const workload& w, const Cost& cost, double a,
                                        bool incremental) {
  const std::size_t L = w.size();
  if (L == 0) return {};
  // 1-based arrays in the paper's layer numbering; index 0 is the "layer 0" above.
  std::vector<double> tb(L + 1, 0.0), tc(L + 1, 0.0), tau_b(L + 1, 0.0), tau_c(L + 1, 0.0);
  std::vector<double> p(L + 1, 0.0);
  std::vector<char> merged(L + 1, 0);
  for (std::size_t l = 1; l <= L; ++l) { // lines 5-7
    p[l] = static_cast<double>(w.bytes[L - l]);
    tb[l] = w.backward_us[L - l];
    tc[l] = static_cast<double>(cost(p[l]));
  }
  tau_b[L] = w.forward_us;                                                      // Eq. 6 / 19
  for (std::size_t l = L - 1; l >= 1; --l) tau_b[l] = tau_b[l + 1] + tb[l + 1]; // lines 9-10
  tau_b[0] = tau_b[1] + tb[1];

  auto comm_start = [&](std::size_t l) { // line 25 (Eq. 20)
    const double after_previous = tau_c[l + 1] + tc[l + 1];
    const double ready = tau_b[l] + tb[l];
    tau_c[l] = after_previous > ready ? after_previous : ready;
  };
  auto calculate_comm_start = [&] { // lines 21-26
    tau_c[L] = tau_b[L] + tb[L];
    for (std::size_t l = L - 1; l >= 1; --l) comm_start(l);
  };
  if (incremental)
    tau_c[L] = tau_b[L] + tb[L];
  else
    calculate_comm_start();              // line 11
  for (std::size_t l = L; l >= 2; --l) { // lines 12-16
    if (incremental && l < L) comm_start(l);
    if (tau_b[l - 2] - tau_c[l] < a) {
      tc[l] = 0.0; // MERGE, lines 17-20
      p[l - 1] += p[l];
      tc[l - 1] = static_cast<double>(cost(p[l - 1]));
      if (!incremental) calculate_comm_start();
      merged[l] = 1;
    }
  }
  // A merged layer l joins layer l-1's bucket: no boundary after tensor k = L - l.
  return plan_from_closings(L, [&](std::size_t k) { return !merged[L - k]; });
}

} // namespace detail

/// MG-WFBP merged-gradient planner (Algorithm 1), O(L).
struct mgwfbp_planner {
  static constexpr std::string_view name = "mgwfbp";
  mgwfbp_options options{};

  template <cost_model Cost>
  constexpr bucket_plan plan(const workload& w, const Cost& cost) const {
    const double a = options.startup_us >= 0 ? options.startup_us : startup_cost_us(cost);
    return detail::mgwfbp_algorithm1(w, cost, a, true);
  }
};

} // namespace tcoll::plan
