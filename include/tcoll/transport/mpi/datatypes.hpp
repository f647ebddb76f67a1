#pragma once
/// \file
/// How tcoll's element types and ops map to MPI for the vendor collective: MPI's own
/// datatypes and ops where they exist, else a contiguous byte datatype and a cached
/// `MPI_Op_create` op that applies the tcoll op.
#include <mpi.h>

#include <cstddef>
#include <type_traits>

#include "../../core/ops.hpp"
#include "../../core/scalar_type.hpp"
#include "../../detail/mpi_error.hpp"

namespace tcoll::detail::mpi {

/// The MPI datatype of a built-in element type, or MPI_DATATYPE_NULL if there is none.
template <class T>
MPI_Datatype builtin_datatype() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, long double>)
    return MPI_LONG_DOUBLE;
  else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // Map by width and signedness so int64_t (long) and long long both find a type.
    constexpr bool s = std::is_signed_v<T>;
    if constexpr (sizeof(T) == 1)
      return s ? MPI_INT8_T : MPI_UINT8_T;
    else if constexpr (sizeof(T) == 2)
      return s ? MPI_INT16_T : MPI_UINT16_T;
    else if constexpr (sizeof(T) == 4)
      return s ? MPI_INT32_T : MPI_UINT32_T;
    else if constexpr (sizeof(T) == 8)
      return s ? MPI_INT64_T : MPI_UINT64_T;
    else
      return MPI_DATATYPE_NULL;
  } else
    return MPI_DATATYPE_NULL;
}

/// The built-in MPI op equivalent to a tcoll op on type T, or MPI_OP_NULL. Only sum, prod,
/// min and max on built-in types qualify; avg travels as a sum and is divided afterwards.
template <class T, class Op>
MPI_Op builtin_op() {
  if (builtin_datatype<T>() == MPI_DATATYPE_NULL) return MPI_OP_NULL;
  if constexpr (std::is_same_v<Op, sum_op> || std::is_same_v<Op, avg_op>)
    return MPI_SUM;
  else if constexpr (std::is_same_v<Op, prod_op>)
    return MPI_PROD;
  else if constexpr (std::is_same_v<Op, min_op>)
    return MPI_MIN;
  else if constexpr (std::is_same_v<Op, max_op>)
    return MPI_MAX;
  else
    return MPI_OP_NULL;
}

/// The MPI datatype of a scalar type named at run time, or MPI_DATATYPE_NULL (half and
/// bfloat16, which travel as bytes).
inline MPI_Datatype builtin_datatype(scalar_type t) {
  if (t == scalar_type::float16 || t == scalar_type::bfloat16) return MPI_DATATYPE_NULL;
  return visit_scalar_type(t, []<class T>(type_tag<T>) { return builtin_datatype<T>(); });
}

/// The built-in MPI op of a reduction named at run time on type `t` (avg travels as a sum),
/// or MPI_OP_NULL (types without an MPI datatype, and MPI's logical ops, which MPI defines
/// on C integers but tcoll computes as 0/1 of any width with its own kernel).
inline MPI_Op builtin_op(scalar_type t, reduce_kind k) {
  if (builtin_datatype(t) == MPI_DATATYPE_NULL) return MPI_OP_NULL;
  switch (k) {
  case reduce_kind::sum:
  case reduce_kind::avg:
    return MPI_SUM;
  case reduce_kind::prod:
    return MPI_PROD;
  case reduce_kind::min:
    return MPI_MIN;
  case reduce_kind::max:
    return MPI_MAX;
  default:
    return MPI_OP_NULL;
  }
}

/// A committed datatype of sizeof(T) contiguous bytes (half, bfloat16, user structs),
/// created on first use and cached for the life of the process (MPI_Finalize frees it).
template <class T>
MPI_Datatype byte_datatype(int rank) {
  static const MPI_Datatype type = [rank] {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    check(MPI_Type_contiguous(static_cast<int>(sizeof(T)), MPI_BYTE, &t), "MPI_Type_contiguous",
          rank);
    check(MPI_Type_commit(&t), "MPI_Type_commit", rank);
    return t;
  }();
  return type;
}

/// The op object an `MPI_Op_create` function applies. MPI calls user functions in the
/// thread that called the collective, so a thread-local pointer carries stateful user ops
/// (capturing lambdas) into the C callback without global state shared between threads.
template <class Op>
inline thread_local const Op* current_op = nullptr;

/// MPI user function: inout[i] = op(in[i], inout[i]) (MPI passes the lower ranks' partial
/// result as `in`, so non-commutative ops keep rank order), accumulating in
/// accumulator_t<T>. avg sums here and divides after the collective.
template <class T, class Op>
void user_function(void* in, void* inout, int* len, MPI_Datatype*) {
  const Op& op = *current_op<Op>;
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  if constexpr (array_op<Op>)
    op.reduce_arrays(b, a, b, static_cast<std::size_t>(*len));
  else
    for (int i = 0; i < *len; ++i) b[i] = apply_op(op, a[i], b[i]);
}

/// `MPI_Op_create` for (T, Op), created once per process with the op's commutativity.
template <class T, class Op>
MPI_Op user_mpi_op(int rank) {
  static const MPI_Op mop = [rank] {
    MPI_Op o = MPI_OP_NULL;
    check(MPI_Op_create(&user_function<T, Op>, commutative_op<Op> ? 1 : 0, &o), "MPI_Op_create",
          rank);
    return o;
  }();
  return mop;
}

/// The MPI datatype and op a reduction travels with.
struct datatype_and_op {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
};

/// The datatype and op of `native_allreduce<T, Op>`: MPI's own where the element type and
/// the op have one (for a `described_op`, those of the type and reduction it names at run
/// time, and a user op then works on T's bytes), else the byte datatype of T and the
/// `MPI_Op_create` op of (T, Op).
template <class T, class Op>
datatype_and_op native_datatype_and_op([[maybe_unused]] const Op& op, int rank) {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op mop = MPI_OP_NULL;
  if constexpr (described_op<Op>) {
    type = builtin_datatype(op.type());
    mop = type == MPI_DATATYPE_NULL ? MPI_OP_NULL : builtin_op(op.type(), op.kind());
    if (mop == MPI_OP_NULL) type = MPI_DATATYPE_NULL; // a user op works on T's bytes
  } else {
    type = builtin_datatype<T>();
    mop = builtin_op<T, Op>();
  }
  if (type == MPI_DATATYPE_NULL) type = byte_datatype<T>(rank);
  if (mop == MPI_OP_NULL) mop = user_mpi_op<T, Op>(rank);
  return {type, mop};
}

} // namespace tcoll::detail::mpi
