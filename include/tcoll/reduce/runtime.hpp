#pragma once
/// \file
/// `runtime_op`: a reduction chosen at run time, for the runtime-typed entry points. It
/// reduces whole arrays through a kernel compiled once per (type, op) from the same host
/// loops as `cpu_reducer` (so its results are bit for bit those of the typed op), and the
/// algorithms run on `raw_element<N>`: a program that takes its types as values instantiates
/// each algorithm once per element size instead of once per (type, op).
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/scalar_type.hpp"
#include "cpu.hpp"

namespace tcoll {

namespace detail {

using array_kernel = void (*)(void* dst, const void* a, const void* b, std::size_t n);
using average_kernel = void (*)(void* data, std::size_t n, int nranks);

/// dst[i] = op(a[i], b[i]) on host arrays of T (dst may be a or b): cpu_reducer's loops.
template <class T, class Op>
void reduce_array(void* dst, const void* a, const void* b, std::size_t n) {
  cpu_reducer{}.reduce(Op{}, static_cast<T*>(dst), static_cast<const T*>(a),
                       static_cast<const T*>(b), n);
}

/// data[i] = data[i] / nranks (avg's final step) on a host array of T.
template <class T>
void average_array(void* data, std::size_t n, int nranks) {
  cpu_reducer{}.finalize(avg_op{}, static_cast<T*>(data), n, nranks);
}

/// The kernel of (T, kind); null where the kind does not apply to T. avg reduces as sum.
template <class T>
array_kernel kernel_of(reduce_kind k) {
  if (k == reduce_kind::avg) k = reduce_kind::sum;
  return visit_reduce_kind(k, []<class Op>(Op) -> array_kernel {
    if constexpr (std::is_same_v<Op, avg_op> || !reduces(scalar_type_of<T>(), reduce_kind_of<Op>()))
      return nullptr; // avg: mapped to sum above
    else
      return &reduce_array<T, Op>;
  });
}

/// Kernels of every (type, kind), and avg's division per type.
struct runtime_kernels {
  std::array<std::array<array_kernel, reduce_kind_count>, scalar_type_count> reduce{};
  std::array<average_kernel, scalar_type_count> average{};
};

/// The kernels, built once. A template only so that a program of several translation units
/// can compile them in one of them: about a hundred vectorized loops, 3 s of an -O3 compile
/// per translation unit that constructs a `runtime_op`. Such a program defines
/// TCOLL_EXTERN_RUNTIME_KERNELS in every translation unit and writes
/// TCOLL_RUNTIME_KERNELS_INSTANCE in one (the preload and allreduce_perf do).
template <class = void>
const runtime_kernels& kernel_table() {
  static const runtime_kernels table = [] {
    runtime_kernels k;
    for (int t = 0; t < scalar_type_count; ++t)
      visit_scalar_type(static_cast<scalar_type>(t), [&]<class T>(type_tag<T>) {
        for (int o = 0; o < reduce_kind_count; ++o)
          k.reduce[t][o] = kernel_of<T>(static_cast<reduce_kind>(o));
        k.average[t] = &average_array<T>;
      });
    return k;
  }();
  return table;
}
#ifdef TCOLL_EXTERN_RUNTIME_KERNELS
extern template const runtime_kernels& kernel_table<void>();
#endif

inline const runtime_kernels& kernels() {
  return kernel_table();
}

} // namespace detail

/// A reduction of elements of `type()` under `kind()`, chosen at run time; an `array_op`
/// (the CPU reducer and the MPI transport hand it whole arrays). Every kind it takes is
/// commutative. It never finalizes: `avg` reduces as a sum, and the runtime-typed entry
/// points divide once at the end (`finalize_average`), which gives the bits of the typed
/// `avg_op`. Host memory only.
class runtime_op {
public:
  static constexpr bool commutative = true;
  static constexpr std::string_view name = "runtime";

  /// Throws `invalid_argument` naming `op` where `kind` does not apply to `type` (bitwise or
  /// logical kinds on a floating type).
  runtime_op(scalar_type type, reduce_kind kind, int rank = -1) : type_(type), kind_(kind) {
    if (static_cast<unsigned>(type) >= scalar_type_count ||
        static_cast<unsigned>(kind) >= reduce_kind_count)
      throw invalid_argument("op: scalar_type or reduce_kind out of range", rank);
    kernel_ = detail::kernels().reduce[static_cast<int>(type)][static_cast<int>(kind)];
    if (kernel_ == nullptr)
      throw invalid_argument("op: " + std::string(name_of(kind)) + " does not apply to " +
                                 std::string(name_of(type)) + " elements",
                             rank);
  }
  /// The op of the C++ element type `T` and predefined op `Op` (a kind that applies to `T`),
  /// with its one kernel: no kernel table is built (what the typed calls that run on the
  /// runtime-typed path take, communicator.hpp).
  template <class T, class Op>
  static runtime_op of() {
    constexpr reduce_kind kind = reduce_kind_of<Op>();
    static_assert(reduces(scalar_type_of<T>(), kind), "tcoll: the op does not apply to T");
    using Kernel = std::conditional_t<kind == reduce_kind::avg, sum_op, Op>; // avg: a sum
    return runtime_op(scalar_type_of<T>(), kind, &detail::reduce_array<T, Kernel>);
  }
  scalar_type type() const noexcept { return type_; }
  reduce_kind kind() const noexcept { return kind_; }
  /// dst[i] = op(a[i], b[i]) over n elements; dst may be a or b (exactly), else no overlap.
  void reduce_arrays(void* dst, const void* a, const void* b, std::size_t n) const {
    if (n) kernel_(dst, a, b, n);
  }

private:
  runtime_op(scalar_type type, reduce_kind kind, detail::array_kernel kernel) noexcept
      : type_(type), kind_(kind), kernel_(kernel) {}

  scalar_type type_;
  reduce_kind kind_;
  detail::array_kernel kernel_ = nullptr;
};

/// avg's final step on `n` elements of `type` at `data`: each divided by `nranks`, as the
/// typed `avg_op` does.
inline void finalize_average(scalar_type type, void* data, std::size_t n, int nranks) {
  if (n) detail::kernels().average[static_cast<int>(type)](data, n, nranks);
}

} // namespace tcoll

/// Compiles the runtime kernel table in this translation unit: the one translation unit of a
/// program built with TCOLL_EXTERN_RUNTIME_KERNELS that does (see `kernel_table`).
#define TCOLL_RUNTIME_KERNELS_INSTANCE                                                             \
  template const ::tcoll::detail::runtime_kernels& ::tcoll::detail::kernel_table<void>();
