#pragma once
/// \file
/// `visit_algorithm`: the one dispatch from an `algorithm_id` (table.hpp) to
/// the algorithm object it names, for every collective. Whatever picks an algorithm by value
/// (a selection rule, a built-in choice by size, a benchmark's `-a` name) calls
/// `visit_algorithm<C>(id, f)` and gets the object of that id among the algorithms the table
/// lists for `C`; allreduce's form (`visit_algorithm(id, automatic, f)`) also steps past what
/// the op or the transport cannot take. The objects are `detail::algorithm_objects`
/// (table.hpp).
#include <string>
#include <type_traits>

#include "../core/collective_table.hpp"
#include "../core/error.hpp"
#include "select.hpp"
#include "table.hpp"

namespace tcoll {

namespace detail {
/// The first of `knobs` of type `A`, else `A{}` (the default knobs).
template <class A>
A knobs_of() {
  return A{};
}
template <class A, class K, class... Rest>
A knobs_of(const K& k, const Rest&... rest) {
  if constexpr (std::is_same_v<A, K>)
    return k;
  else
    return knobs_of<A>(rest...);
}

/// Every algorithm of the list that the table lists for `C` and `Keep<A>` allows: `f(object)`
/// for the one whose id is `id`. False where none is.
template <collective C, template <class> class Keep, class... A, class F, class... K>
bool visit_in(algorithm_list<A...>, algorithm_id id, F& f, const K&... knobs) {
  bool found = false;
  (
      [&] {
        if constexpr (implements(C, algorithm_id_of<A>))
          if constexpr (Keep<A>::value)
            if (!found && id == algorithm_id_of<A>) {
              found = true;
              f(knobs_of<A>(knobs...));
            }
      }(),
      ...);
  return found;
}

template <class A>
struct keep_every : std::true_type {};

[[noreturn]] inline void throw_not_visitable(collective c, algorithm_id id) {
  if (static_cast<unsigned>(id) >= all_algorithm_ids.size())
    throw invalid_argument("visit_algorithm: algorithm id " + std::to_string(static_cast<int>(id)) +
                           " is not one of algorithm_id's");
  std::string objects; // what the table lists for c, but the communicator
  for (algorithm_id a : algorithms_of(c))
    if (a != algorithm_id::hierarchical)
      objects += (objects.empty() ? "" : ", ") + std::string(to_string(a));
  throw invalid_argument(
      "visit_algorithm: " + std::string(to_string(id)) + " is not " +
      (id == algorithm_id::hierarchical ? std::string("an algorithm object (it is a communicator)")
                                        : "an algorithm of " + std::string(to_string(c))) +
      " on a single transport (" + std::string(to_string(c)) + ": " + objects + ")");
}
} // namespace detail

/// Calls `f(algorithm)` with the object of algorithm `id` as an algorithm of collective `C`
/// (one the table lists for `C`): the first of `knobs` of its type, else its defaults.
/// Throws `invalid_argument` naming the id and the collective for any other id, among them
/// `hierarchical` (a communicator that is a hierarchy runs its own, whatever object it is
/// given) and `passthrough` for a collective other than allreduce (the caller hands such a
/// call to the vendor: the preload to MPI).
template <collective C, class F, class... Knobs>
void visit_algorithm(algorithm_id id, F&& f, const Knobs&... knobs) {
  if (!detail::visit_in<C, detail::keep_every>(detail::algorithm_objects{}, id, f, knobs...))
    detail::throw_not_visitable(C, id);
}

/// Calls `f(algorithm)` for every algorithm object the table lists for collective `C`, in
/// the table's order (a communicator-only entry such as `hierarchical` is passed over): what
/// test matrices and benchmarks run when asked for "every algorithm".
template <collective C, class F, class... Knobs>
void for_each_algorithm(F&& f, const Knobs&... knobs) {
  for (algorithm_id a : algorithms_of(C))
    if (a != algorithm_id::hierarchical) visit_algorithm<C>(a, f, knobs...);
}

/// What a caller can run, known at compile time so that an algorithm the op or the
/// transport cannot take is never instantiated.
struct algorithm_support {
  /// The op is commutative: ring and multi_ring (which reorder operands) may run.
  bool commutative = true;
  /// The transport has a vendor allreduce for the type and op: passthrough may run.
  bool native = true;
};

namespace detail {
template <algorithm_support Support>
struct supported_by {
  template <class A>
  struct keep : std::bool_constant<(Support.native || !std::is_same_v<A, passthrough>)&&(
                    Support.commutative || A::keeps_operand_order)> {};
};
} // namespace detail

/// Allreduce's dispatch: `visit_algorithm<collective::allreduce>` with the knobs of `knobs`
/// (`ring_knobs`, `multi_ring_knobs`, `in_segment_knobs`). An id that `Support` rules out
/// runs what `automatic` would instead: without `native`, passthrough runs ring; without
/// `commutative`, ring, multi_ring and passthrough run recursive halving-doubling (for such
/// an op `automatic::choose` has already picked an order-keeping algorithm).
template <algorithm_support Support = algorithm_support{}, class F>
void visit_algorithm(algorithm_id id, const automatic& knobs, F&& f) {
  if (!Support.native && id == algorithm_id::passthrough) id = algorithm_id::ring;
  if (!Support.commutative && (id == algorithm_id::ring || id == algorithm_id::multi_ring ||
                               id == algorithm_id::passthrough))
    id = algorithm_id::recursive_halving_doubling;
  if (!detail::visit_in<collective::allreduce, detail::supported_by<Support>::template keep>(
          detail::algorithm_objects{}, id, f, knobs.ring_knobs, knobs.multi_ring_knobs,
          knobs.in_segment_knobs))
    detail::throw_not_visitable(collective::allreduce, id);
}

} // namespace tcoll
