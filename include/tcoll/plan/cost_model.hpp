#pragma once
/// \file
/// Communication cost models: the alpha-beta-gamma cost of each algorithm the library
/// implements, priced from the traffic formula its object states (`A::traffic`,
/// core/traffic.hpp: MG-WFBP Table II, Thakur/Rabenseifner/Gropp 2005 for the
/// non-power-of-two forms), GradientFlow Sec. 2.4 for the hierarchical allreduce's two
/// forms, the linear model T(M) = a + b M (MG-WFBP Eq. 9) and the piecewise log/linear
/// model of OSF Eq. 18. All times are microseconds, all sizes bytes.

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "tcoll/algorithm/table.hpp"
#include "tcoll/core/collective_table.hpp"
#include "tcoll/core/error.hpp"
#include "tcoll/core/traffic.hpp"
#include "tcoll/plan/detail/math.hpp"
#include "tcoll/plan/interface.hpp"

namespace tcoll::plan {

/// Point-to-point parameters of one link class and the busiest rank's traffic of a flat
/// algorithm, the one set of formulas the costs below are computed from (core/traffic.hpp:
/// each algorithm's object states its own, `A::traffic`; tests/plan/test_cost_counts.cpp
/// checks each field against what the counting transport and a counting reducer record for
/// the real algorithm).
using tcoll::link_params;
using tcoll::rank_traffic;

namespace detail {
template <class A>
concept has_traffic_formula = requires(collective c) {
  { A::traffic(c, 1.0, 2) } -> std::same_as<rank_traffic>;
};

/// `A::traffic(c, bytes, ranks)` into `out` for the object of the list whose id is `a`, if
/// it states a formula; false otherwise.
constexpr bool flat_traffic(tcoll::detail::algorithm_list<>, collective, algorithm_id, double, int,
                            rank_traffic&) {
  return false;
}
template <class A, class... Rest>
constexpr bool flat_traffic(tcoll::detail::algorithm_list<A, Rest...>, collective c, algorithm_id a,
                            double bytes, int ranks, rank_traffic& out) {
  if constexpr (has_traffic_formula<A>)
    if (algorithm_id_of<A> == a) {
      out = A::traffic(c, bytes, ranks);
      return true;
    }
  return flat_traffic(tcoll::detail::algorithm_list<Rest...>{}, c, a, bytes, ranks, out);
}
} // namespace detail

/// Ring (reduce-scatter ring + allgather ring), any p: every rank sends and receives
/// 2(p-1) chunks of n/p, all in full-duplex rounds, and reduces p-1 of them (`ring::traffic`).
constexpr rank_traffic ring_allreduce_traffic(double bytes, int ranks) noexcept {
  return ring::traffic(collective::allreduce, bytes, ranks);
}

/// Ring allreduce: 2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma.
constexpr double ring_allreduce_us(double bytes, int ranks, link_params l) noexcept {
  return ring_allreduce_traffic(bytes, ranks).us(l);
}

/// Largest power of two <= ranks: the core that folded algorithms run on.
constexpr int power_of_two_core(int ranks) noexcept {
  return ranks <= 1 ? 1 : tcoll::detail::floor_pow2(ranks);
}

/// The MPICH non-power-of-two fold on its busiest rank (a core rank with an extra
/// partner): it receives the partner's whole vector and reduces it before the core runs,
/// and sends the whole result back afterwards; neither overlaps anything
/// (algorithm/detail/fold.hpp).
constexpr rank_traffic non_power_of_two_fold_traffic(double bytes, int ranks) noexcept {
  return tcoll::detail::fold_traffic(bytes, ranks);
}

/// The fold's cost: 2 alpha + 2 n beta + n gamma.
constexpr double non_power_of_two_fold_us(double bytes, int ranks, link_params l) noexcept {
  return non_power_of_two_fold_traffic(bytes, ranks).us(l);
}

/// Recursive doubling: lg p' full-duplex exchanges of the whole vector on the core
/// p' = 2^floor(lg p), each reduced, plus the fold (`recursive_doubling::traffic`).
constexpr rank_traffic recursive_doubling_allreduce_traffic(double bytes, int ranks) noexcept {
  return recursive_doubling::traffic(collective::allreduce, bytes, ranks);
}

/// Recursive doubling: lg p' (alpha + n beta + n gamma) plus the fold.
constexpr double recursive_doubling_allreduce_us(double bytes, int ranks, link_params l) noexcept {
  return recursive_doubling_allreduce_traffic(bytes, ranks).us(l);
}

/// Recursive halving-doubling (Rabenseifner): reduce-scatter by recursive halving then
/// allgather by recursive doubling on the core p' (2 lg p' full-duplex exchanges moving
/// (p'-1)/p' n each way per phase, the halving's reduced), plus the fold
/// (`recursive_halving_doubling::traffic`).
constexpr rank_traffic recursive_halving_doubling_allreduce_traffic(double bytes,
                                                                    int ranks) noexcept {
  return recursive_halving_doubling::traffic(collective::allreduce, bytes, ranks);
}

/// Recursive halving-doubling: 2 lg p' alpha + 2 (p'-1)/p' n beta + (p'-1)/p' n gamma,
/// plus the fold.
constexpr double recursive_halving_doubling_allreduce_us(double bytes, int ranks,
                                                         link_params l) noexcept {
  return recursive_halving_doubling_allreduce_traffic(bytes, ranks).us(l);
}

/// Deprecated name of `recursive_halving_doubling_allreduce_us` (the algorithm's one name is
/// recursive_halving_doubling, as in algorithm/recursive_halving_doubling.hpp).
[[deprecated("use recursive_halving_doubling_allreduce_us")]] constexpr double
halving_doubling_allreduce_us(double bytes, int ranks, link_params l) noexcept {
  return recursive_halving_doubling_allreduce_us(bytes, ranks, l);
}

/// Binomial tree reduce to a root followed by binomial tree broadcast; each has
/// ceil(lg p) rounds for any p, so no fold is needed. The root receives (and reduces)
/// ceil(lg p) whole vectors, then sends ceil(lg p); nothing overlaps
/// (`binomial_tree::traffic`).
constexpr rank_traffic binomial_tree_allreduce_traffic(double bytes, int ranks) noexcept {
  return binomial_tree::traffic(collective::allreduce, bytes, ranks);
}

/// Binomial tree: ceil(lg p) (alpha + n beta + n gamma) + ceil(lg p) (alpha + n beta).
constexpr double binomial_tree_allreduce_us(double bytes, int ranks, link_params l) noexcept {
  return binomial_tree_allreduce_traffic(bytes, ranks).us(l);
}

/// Two-level machine: groups of `group_size` ranks joined by `intra` links, groups
/// joined by `inter` links.
struct hierarchy_params {
  int group_size = 1;
  link_params intra{};
  link_params inter{};
};

/// Hierarchical allreduce as GradientFlow Sec. 2.4 describes it: reduce to the group
/// leader, ring allreduce across the leaders, broadcast from the leader. The intra-group
/// reduce and broadcast are binomial trees (ceil(lg g) rounds of the whole vector),
/// which is why GradientFlow calls them "not bandwidth optimal".
/// Throws `tcoll::invalid_argument` if ranks is not a multiple of group_size.
constexpr double hierarchical_leader_allreduce_us(double bytes, int ranks, hierarchy_params h) {
  if (h.group_size < 1 || ranks % h.group_size != 0)
    throw tcoll::invalid_argument("hierarchical allreduce: ranks must be a multiple of group_size");
  const double intra_rounds = detail::ceil_log2(static_cast<std::uint64_t>(h.group_size));
  const double reduce = intra_rounds * (h.intra.alpha_us + bytes * h.intra.beta_us_per_byte +
                                        bytes * h.intra.gamma_us_per_byte);
  const double broadcast = intra_rounds * (h.intra.alpha_us + bytes * h.intra.beta_us_per_byte);
  return reduce + ring_allreduce_us(bytes, ranks / h.group_size, h.inter) + broadcast;
}

/// Hierarchical allreduce by shards: ring reduce-scatter inside each group, ring
/// allreduce of each 1/g shard across the groups (g concurrent rings), ring allgather
/// inside each group.
constexpr double hierarchical_sharded_allreduce_us(double bytes, int ranks, hierarchy_params h) {
  if (h.group_size < 1 || ranks % h.group_size != 0)
    throw tcoll::invalid_argument("hierarchical allreduce: ranks must be a multiple of group_size");
  const double g = h.group_size;
  const double intra_share = (g - 1) / g * bytes;
  const double reduce_scatter =
      (g - 1) * h.intra.alpha_us +
      intra_share * (h.intra.beta_us_per_byte + h.intra.gamma_us_per_byte);
  const double allgather = (g - 1) * h.intra.alpha_us + intra_share * h.intra.beta_us_per_byte;
  return reduce_scatter + ring_allreduce_us(bytes / g, ranks / h.group_size, h.inter) + allgather;
}

/// Does `a` have an allreduce cost formula on one link class (a flat network)? ring,
/// recursive_doubling, recursive_halving_doubling and binomial_tree. The hierarchical
/// allreduce has a formula on two link classes (`allreduce_us`); passthrough (the vendor's)
/// and multi_ring have none.
constexpr bool has_flat_allreduce_cost(algorithm_id a) noexcept {
  rank_traffic unused;
  return implements(collective::allreduce, a) &&
         detail::flat_traffic(tcoll::detail::algorithm_objects{}, collective::allreduce, a, 1.0, 2,
                              unused);
}

/// The name of an allreduce cost as benchmarks print it: the table's name of `a`
/// (`tcoll::to_string`), the hierarchical allreduce's with its form ("hierarchical_leader",
/// "hierarchical_sharded": bench/hier's -a names).
constexpr std::string_view allreduce_name(algorithm_id a,
                                          hierarchical_form form = hierarchical_form::sharded) {
  if (a != algorithm_id::hierarchical) return to_string(a);
  return form == hierarchical_form::leader ? "hierarchical_leader" : "hierarchical_sharded";
}

namespace detail {
/// Why the allreduce cost function `who` has no formula for `a`.
constexpr std::string no_allreduce_formula(std::string_view who, algorithm_id a) {
  std::string why = std::string(who) + ": " + std::string(to_string(a));
  if (!implements(collective::allreduce, a)) {
    why += " is not an allreduce algorithm (the allreduce algorithms:";
    for (algorithm_id x : algorithms_of(collective::allreduce))
      why += (x == algorithms_of(collective::allreduce).front() ? " " : ", ") +
             std::string(to_string(x));
    return why + ")";
  }
  if (a == algorithm_id::hierarchical)
    return why + " has two link classes (its cost is allreduce_us with a hierarchy_params)";
  return why + " has no cost formula (passthrough: the vendor's; multi_ring: K rings; in_segment: "
               "no messages)";
}
} // namespace detail

/// The busiest rank's traffic of a flat allreduce algorithm (see `rank_traffic`).
/// Throws `tcoll::invalid_argument` for an id that is not an allreduce algorithm and for
/// the allreduce algorithms with no flat formula (hierarchical: two link classes;
/// passthrough; multi_ring).
constexpr rank_traffic allreduce_traffic(algorithm_id a, double bytes, int ranks) {
  rank_traffic t;
  if (implements(collective::allreduce, a) &&
      detail::flat_traffic(tcoll::detail::algorithm_objects{}, collective::allreduce, a, bytes,
                           ranks, t))
    return t;
  throw tcoll::invalid_argument(detail::no_allreduce_formula("allreduce_traffic", a));
}

/// Cost of one allreduce of `bytes` on `ranks` ranks by algorithm `a`. Flat algorithms use
/// `h.inter` as the link of every pair (the network); `algorithm_id::hierarchical` uses both
/// levels, in the form `form` (the hierarchical allreduce's default, sharded, unless told;
/// flat algorithms ignore it). Throws `tcoll::invalid_argument` for an id that is not an
/// allreduce algorithm, for those with no formula (passthrough, multi_ring) and, for the
/// hierarchical one, when ranks is not a multiple of `h.group_size`.
constexpr double allreduce_us(algorithm_id a, double bytes, int ranks, hierarchy_params h,
                              hierarchical_form form = hierarchical_form::sharded) {
  if (a == algorithm_id::hierarchical)
    return form == hierarchical_form::leader ? hierarchical_leader_allreduce_us(bytes, ranks, h)
                                             : hierarchical_sharded_allreduce_us(bytes, ranks, h);
  rank_traffic t;
  if (implements(collective::allreduce, a) &&
      detail::flat_traffic(tcoll::detail::algorithm_objects{}, collective::allreduce, a, bytes,
                           ranks, t))
    return t.us(h.inter);
  throw tcoll::invalid_argument(detail::no_allreduce_formula("allreduce_us", a));
}

/// The busiest rank's traffic of collective `c` run by the flat algorithm `a` on one link
/// class (the table of algorithms, algorithm/table.hpp, lists the algorithms of `c`;
/// each algorithm's object states its formula, `A::traffic`): per field the maximum over the
/// ranks (the root for the rooted ones), with equal blocks. `bytes` is the collective's size
/// measure (`collective_description::size_measure`): the vector for allreduce, broadcast
/// and reduce, P blocks for reduce_scatter, allgather, alltoall, gather and scatter and their
/// v forms (equal blocks). Throws `tcoll::invalid_argument` for an algorithm that does not
/// implement `c` and for those with no flat formula (passthrough: the vendor's; multi_ring;
/// in_segment: no messages; hierarchical: two link classes).
constexpr rank_traffic collective_traffic(collective c, algorithm_id a, double bytes, int ranks) {
  rank_traffic t;
  if (implements(c, a) &&
      detail::flat_traffic(tcoll::detail::algorithm_objects{}, c, a, bytes, ranks, t))
    return t;
  throw tcoll::invalid_argument("collective_traffic: no flat formula for " +
                                std::string(to_string(a)) + " as " + std::string(to_string(c)));
}

/// A communication cost model: callable with a message size in bytes, returns
/// microseconds. Planners accept any such model; the optimal planner's shortcuts
/// additionally need it not to decrease when the message grows.
template <class M>
concept cost_model = requires(const M& m, double bytes) {
  { m(bytes) } -> std::convertible_to<double>;
};

/// A cost model that knows whether it is nondecreasing in the size and says so with
/// `nondecreasing()`. The optimal planner takes its monotone shortcuts only for models
/// that say yes (or, for models that cannot say, when the caller vouches for them).
template <class M>
concept monotonicity_reporting_cost_model = cost_model<M> && requires(const M& m) {
  { m.nondecreasing() } -> std::convertible_to<bool>;
};

/// A cost model that is exactly a + b M and says so: planners may use the coefficients.
template <class M>
concept affine_cost_model = cost_model<M> && requires(const M& m) {
  { m.affine() } -> std::same_as<linear_cost>;
};

/// The cost of one allreduce algorithm on a fixed machine and rank count, as a cost_model
/// (`allreduce_us`).
struct allreduce_cost {
  algorithm_id algorithm = algorithm_id::ring;
  int ranks = 1;
  hierarchy_params machine{}; ///< flat algorithms read machine.inter
  /// The hierarchical allreduce's form (read only when `algorithm` is hierarchical).
  hierarchical_form form = hierarchical_form::sharded;

  constexpr double operator()(double bytes) const {
    return allreduce_us(algorithm, bytes, ranks, machine, form);
  }
  /// Every algorithm's cost is affine in the size for a fixed machine and rank count.
  constexpr linear_cost affine() const {
    constexpr double probe = 1073741824.0; // large, so the slope carries no cancellation error
    const double a = (*this)(0.0);
    return {a, ((*this)(probe)-a) / probe};
  }
  /// True when the cost does not decrease with the size (nonnegative link parameters).
  constexpr bool nondecreasing() const { return affine().nondecreasing(); }
};

/// Convenience: the cost of the flat allreduce `algorithm` over `ranks` ranks of a flat
/// network. Throws `tcoll::invalid_argument` unless `has_flat_allreduce_cost(algorithm)`.
constexpr allreduce_cost flat_allreduce(algorithm_id algorithm, int ranks, link_params network) {
  if (!has_flat_allreduce_cost(algorithm))
    throw tcoll::invalid_argument(detail::no_allreduce_formula("flat_allreduce", algorithm));
  return allreduce_cost{algorithm, ranks, hierarchy_params{1, network, network}};
}

/// OSF Eq. 18: t(D) = a1 log2(D) + b1 below the threshold, a2 D + b2 at or above it.
/// The threshold is the bandwidth-delay product of the link. Sizes below one byte are
/// evaluated at one byte, so t(0) = b1 is the cost of the smallest message.
/// The two pieces are fitted separately, so the model may jump down at the threshold;
/// `nondecreasing()` says whether it does (the optimal planner then scans in full).
struct piecewise_cost {
  double log_slope_us = 0.0;     ///< a1, microseconds per doubling of the size
  double log_offset_us = 0.0;    ///< b1
  double linear_slope_us = 0.0;  ///< a2, microseconds per byte
  double linear_offset_us = 0.0; ///< b2
  double threshold_bytes = 0.0;  ///< D_Thresh

  constexpr double operator()(double bytes) const noexcept {
    if (bytes < threshold_bytes)
      return log_slope_us * detail::log2(bytes < 1.0 ? 1.0 : bytes) + log_offset_us;
    return linear_slope_us * bytes + linear_offset_us;
  }

  /// True when t does not decrease with the size: both slopes nonnegative and no drop at
  /// the threshold (the linear piece there is at least the log piece's limit from below).
  constexpr bool nondecreasing() const noexcept {
    if (log_slope_us < 0.0 || linear_slope_us < 0.0) return false;
    if (threshold_bytes <= 0.0) return true; // the linear piece alone
    const double below =
        log_slope_us * detail::log2(threshold_bytes < 1.0 ? 1.0 : threshold_bytes) + log_offset_us;
    return linear_slope_us * threshold_bytes + linear_offset_us >= below;
  }
};

/// Bandwidth-delay product in bytes: bandwidth (bytes/us = 1/beta) times round trip
/// (two latencies). OSF Sec. 4.2 uses it as the piecewise model's threshold.
constexpr double bandwidth_delay_product_bytes(link_params l) noexcept {
  return l.beta_us_per_byte > 0 ? 2.0 * l.alpha_us / l.beta_us_per_byte : 0.0;
}

/// The fixed cost of one collective, MG-WFBP's "a": the model evaluated at zero bytes.
template <cost_model M>
constexpr double startup_cost_us(const M& model) {
  return static_cast<double>(model(0.0));
}

} // namespace tcoll::plan
