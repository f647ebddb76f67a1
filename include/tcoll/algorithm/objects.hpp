#pragma once
/// \file
/// The algorithm objects, one per value of `algorithm_id` (core/collective_table.hpp) except
/// `hierarchical`, which is a communicator (`hierarchical<Intra, Inter>`), not an object a
/// transport runs. The one dispatch (`visit_algorithm`, visit.hpp) and the cost formulas
/// (`plan::collective_traffic`, plan/cost_model.hpp) find an algorithm here by its `id`. A
/// new algorithm is its header, its line in the table and its entry below.
#include "binomial_tree.hpp"
#include "bruck.hpp"
#include "dissemination.hpp"
#include "in_segment.hpp"
#include "linear.hpp"
#include "multi_ring.hpp"
#include "pairwise_exchange.hpp"
#include "passthrough.hpp"
#include "recursive_doubling.hpp"
#include "recursive_halving_doubling.hpp"
#include "ring.hpp"
#include "scatter_allgather.hpp"

namespace tcoll::detail {

template <class... A>
struct algorithm_list {};

/// Every algorithm object, in the order of `algorithm_id`.
using algorithm_objects =
    algorithm_list<ring, recursive_doubling, recursive_halving_doubling, binomial_tree, passthrough,
                   multi_ring, pairwise_exchange, linear, dissemination, bruck, in_segment,
                   scatter_allgather>;

} // namespace tcoll::detail
