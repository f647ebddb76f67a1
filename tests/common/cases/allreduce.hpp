#pragma once
/// \file
/// Shared rank-level test bodies, topic: Allreduce matrix.
/// (one of the topics of tests/common/collective_cases.hpp; see that file for the rules
/// every body follows).
#include "algorithms.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Allreduce matrix.

/// What `allreduce_matrix` sweeps. Empty name lists mean "all".
struct matrix_options {
  std::vector<std::size_t> counts;
  std::vector<std::string> algorithms = all_algorithms();
  std::vector<std::string> types;
  std::vector<std::string> ops;
  bool in_place = true;
  bool out_of_place = true;
  /// Non-zero: ring (and automatic's ring) use this max_segment_bytes.
  std::size_t ring_segment_bytes = 0;
  /// Check every rank's output against rank 0's by fingerprint (side channel).
  bool check_identity = true;
  /// Varies the inputs between calls.
  std::uint64_t salt = 1;
};

/// Does the matrix run (T, Op) through the runtime-typed entry point? Every type but float
/// under the predefined ops, on host memory with the CPU reducer: an algorithm sees the
/// element type only through its size and the reducer's kernel, so one instantiation per
/// element size covers them (tests/threads_runtime_types.cpp proves the runtime path equal
/// to the typed one, kernel by kernel and size by size). float, the non-commutative user
/// op and every other reducer run the typed call (float's, on the CPU reducer, runs on the
/// same runtime-typed instantiations: communicator.hpp, `lowers_reduction`).
template <class T, class Op, class Buffers>
constexpr bool runs_runtime_typed() {
  return std::is_same_v<decltype(std::declval<const Buffers&>().reducer()), cpu_reducer> &&
         !std::is_same_v<T, float> && arithmetic_element<T> &&
         (std::is_same_v<Op, sum_op> || std::is_same_v<Op, prod_op> || std::is_same_v<Op, min_op> ||
          std::is_same_v<Op, max_op> || std::is_same_v<Op, avg_op>);
}

/// `allreduce` of the case: typed, or runtime-typed where `runs_runtime_typed`.
template <class T, class Op, transport Tr, class Algo, class Buffers>
void matrix_allreduce(Tr& t, const T* send, T* recv, std::size_t n, const Op& op, const Algo& algo,
                      const Buffers& b) {
  if constexpr (runs_runtime_typed<T, Op, Buffers>())
    allreduce(t, static_cast<const void*>(send), static_cast<void*>(recv), n, scalar_type_of<T>(),
              reduce_kind_of<Op>(), algo);
  else
    allreduce(t, send, recv, n, op, algo, b.reducer());
}

/// The allreduce of one algorithm, as a plain function of the algorithm's address: the one
/// part of a case that depends on the algorithm. The case bodies below are compiled once per
/// (type, op) and reach the algorithm through it, not once per (type, op, algorithm): the
/// matrices' build time goes into what they test.
template <transport Tr, class T, class Op, class Buffers>
using allreduce_call = void (*)(Tr&, const T*, T*, std::size_t, const Op&, const void* algo,
                                const Buffers&);

template <transport Tr, class T, class Op, class Algo, class Buffers>
void call_allreduce(Tr& t, const T* send, T* recv, std::size_t n, const Op& op, const void* algo,
                    const Buffers& b) {
  matrix_allreduce<T>(t, send, recv, n, op, *static_cast<const Algo*>(algo), b);
}

/// Runs one allreduce case (`call` with `algo`) and checks the result, the untouched input
/// (out of place) and the cross-rank identity.
template <transport Tr, class T, class Op, class Buffers>
void allreduce_case_with(Tr& t, allreduce_call<Tr, T, Op, Buffers> call, const void* algo,
                         const Op& op, op_kind k, std::size_t n, bool in_place, const case_id& id,
                         std::uint64_t salt, bool identity, const Buffers& b) {
  const case_data<T> d = make_case<T>(k, t.size(), t.rank(), n, salt);
  auto out = b.template allocate<T>(n);
  const std::string what = id.str();
  if (in_place) {
    b.upload(out, d.input);
    call(t, out.data(), out.data(), n, op, algo, b);
  } else {
    auto in = b.template allocate<T>(n);
    b.upload(in, d.input);
    call(t, static_cast<const T*>(in.data()), out.data(), n, op, algo, b);
    check_equal(b.download(in, n), d.input, what + " (input must stay untouched)");
  }
  const std::vector<T> got = b.download(out, n);
  check_equal(got, d.expected, what);
  if (identity) check_identical_across_ranks(t, got.data(), n * sizeof(T), what);
}

/// Runs one allreduce case of algorithm `algo` (see `allreduce_case_with`).
template <transport Tr, class T, class Op, class Algo, class Buffers = host_buffers>
void allreduce_case(Tr& t, const Algo& algo, const Op& op, op_kind k, std::size_t n, bool in_place,
                    const case_id& id, std::uint64_t salt, bool identity, const Buffers& b = {}) {
  allreduce_case_with<Tr, T, Op, Buffers>(t, &call_allreduce<Tr, T, Op, Algo, Buffers>, &algo, op,
                                          k, n, in_place, id, salt, identity, b);
}

/// Every count x {in place, out of place} of `opt` for one (type, op) and one algorithm
/// (`call` with `algo`, printed as `label`).
template <transport Tr, class T, class Op, class Buffers>
void allreduce_counts(Tr& t, allreduce_call<Tr, T, Op, Buffers> call, const void* algo,
                      const std::string& label, const Op& op, op_kind k, const matrix_options& opt,
                      const Buffers& b) {
  for (std::size_t n : opt.counts)
    for (int ip = 0; ip < 2; ++ip) {
      const bool in_place = ip == 1;
      if ((in_place && !opt.in_place) || (!in_place && !opt.out_of_place)) continue;
      const case_id id{label, type_name<T>(), op_name(k), n, t.size(), t.rank(), in_place};
      allreduce_case_with<Tr, T, Op, Buffers>(t, call, algo, op, k, n, in_place, id, opt.salt + n,
                                              opt.check_identity, b);
    }
}

/// Every algorithm x type x op x count x {in place, out of place} of `opt` on transport `t`
/// (typed or runtime-typed: see `runs_runtime_typed`). Every rank of `t` calls it with the
/// same options.
template <transport Tr, class Buffers = host_buffers>
void allreduce_matrix(Tr& t, const matrix_options& opt, const Buffers& b = {}) {
  for (const std::string& name : opt.algorithms)
    with_algorithm(name, opt.ring_segment_bytes, [&]<class Algo>(const Algo& algo) {
      const std::string label = algorithm_label(algo, opt.ring_segment_bytes);
      for_each_type(opt.types, [&]<class T>(type_tag<T>) {
        constexpr bool nc = accepts_noncommutative<Algo>() && std::is_integral_v<T>;
        for_each_op<nc>(opt.ops, [&]<class Op>(const Op& op, op_kind k) {
          if constexpr (commutative_op<Op> || accepts_noncommutative<Algo>())
            allreduce_counts<Tr, T, Op, Buffers>(t, &call_allreduce<Tr, T, Op, Algo, Buffers>,
                                                 &algo, label, op, k, opt, b);
        });
      });
    });
}

} // namespace tcoll::testing
