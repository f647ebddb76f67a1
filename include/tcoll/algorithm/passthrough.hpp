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
  /// Its line in the table of collectives (core/collective_table.hpp).
  static constexpr algorithm_id id = algorithm_id::passthrough;
  static constexpr std::string_view name = to_string(id);
  static constexpr bool keeps_operand_order = false;
};

/// Does transport `Tr` offer a vendor allreduce of `T` under `Op`?
template <class Tr, class T, class Op>
concept has_native_allreduce = requires(Tr& t, const T* s, T* r, std::size_t n, const Op& op) {
  t.native_allreduce(s, r, n, op);
};

} // namespace tcoll
