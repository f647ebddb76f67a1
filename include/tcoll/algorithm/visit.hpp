#pragma once
/// \file
/// `visit_algorithm`: the one dispatch from an `algorithm_id` (select.hpp) to the algorithm
/// object it names. `allreduce` and the prepared collectives resolve `automatic` through it;
/// callers that select by name (benchmarks, the training app, the preload) go
/// `parse_algorithm(name, collective::allreduce)` then here, so a new allreduce algorithm
/// is added in one switch.
#include <string>

#include "../core/error.hpp"
#include "binomial_tree.hpp"
#include "in_segment.hpp"
#include "multi_ring.hpp"
#include "passthrough.hpp"
#include "recursive_doubling.hpp"
#include "recursive_halving_doubling.hpp"
#include "ring.hpp"
#include "select.hpp"

namespace tcoll {

/// What a caller can run, known at compile time so that an algorithm the op or the
/// transport cannot take is never instantiated.
struct algorithm_support {
  /// The op is commutative: ring and multi_ring (which reorder operands) may run.
  bool commutative = true;
  /// The transport has a vendor allreduce for the type and op: passthrough may run.
  bool native = true;
};

/// Calls `f(algorithm)` with the algorithm object `id` names; ring and multi_ring carry the
/// knobs of `knobs` (`ring_knobs`, `multi_ring_knobs`). An id that `Support` rules out runs
/// what `automatic` would instead: without `native`, passthrough runs ring; without
/// `commutative`, ring, multi_ring and passthrough run recursive halving-doubling (for such
/// an op `automatic::choose` has already picked an order-keeping algorithm).
template <algorithm_support Support = algorithm_support{}, class F>
void visit_algorithm(algorithm_id id, const automatic& knobs, F&& f) {
  switch (id) {
  case algorithm_id::multi_ring:
    if constexpr (Support.commutative) return f(knobs.multi_ring_knobs);
    [[fallthrough]];
  case algorithm_id::passthrough:
    if constexpr (Support.native) return f(passthrough{});
    [[fallthrough]];
  case algorithm_id::ring:
    if constexpr (Support.commutative) return f(knobs.ring_knobs);
    [[fallthrough]];
  case algorithm_id::recursive_halving_doubling:
    return f(recursive_halving_doubling{});
  case algorithm_id::recursive_doubling:
    return f(recursive_doubling{});
  case algorithm_id::binomial_tree:
    return f(binomial_tree{});
  case algorithm_id::in_segment:
    return f(knobs.in_segment_knobs);
  case algorithm_id::hierarchical:
  case algorithm_id::pairwise_exchange:
  case algorithm_id::linear:
  case algorithm_id::dissemination:
  case algorithm_id::bruck:
    throw invalid_argument("visit_algorithm: " + std::string(to_string(id)) +
                           " is not an allreduce algorithm of a single transport (" +
                           "core/collective_table.hpp)");
  }
  throw invalid_argument("visit_algorithm: algorithm id " + std::to_string(static_cast<int>(id)) +
                         " is not one of algorithm_id's");
}

} // namespace tcoll
