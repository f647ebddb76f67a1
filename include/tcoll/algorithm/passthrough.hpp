#pragma once
/// \file
/// `passthrough`: the vendor collective (`MPI_Allreduce`, `ncclAllReduce`) selected and
/// benchmarked like any tcoll algorithm. A transport offers it through `native_allreduce`.
#include <cstddef>
#include <string_view>

#include "../core/collective_table.hpp"

namespace tcoll {

/// Selects the transport's own allreduce.
struct passthrough {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "passthrough";
  static constexpr bool keeps_operand_order = false;
};

/// Does transport `Tr` offer a vendor allreduce of `T` under `Op`?
template <class Tr, class T, class Op>
concept has_native_allreduce = requires(Tr& t, const T* s, T* r, std::size_t n, const Op& op) {
  t.native_allreduce(s, r, n, op);
};

} // namespace tcoll
