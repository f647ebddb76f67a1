#pragma once
/// \file
/// A **communicator** is anything collectives run on: a transport, or a machine composed of
/// transports (`hierarchical<Intra, Inter>`). The execution layer and the adaptors take a
/// `communicator` and reach it only through the functions here, so none of them asks
/// which kind it holds (DESIGN.md).
///
/// A composed machine satisfies `composite_communicator` with these members:
///  - `rank()`, `size()`: this rank among all ranks, and their number;
///  - `begin()`: draws the message spaces of one collective on every transport it uses
///    (throwing the cause if one is broken) and returns them as one value, its *tags*;
///  - `for_each_transport(f)`: calls `f(transport&)` for every transport this rank uses;
///  - `engine_transport()`: the transport whose engine runs its queued collectives;
///  - `allreduce_tagged(tags, sendbuf, recvbuf, count, op, algo, red)`: an allreduce in the
///    message spaces `begin()` drew, arguments already checked;
///  - `default_algorithm`: the algorithm-knob type used when a caller names none.
/// For a transport the tags are one `int` and the default algorithm is `automatic`.
#include <concepts>
#include <exception>
#include <utility>
#include <vector>

#include "algorithm/select.hpp"
#include "collectives.hpp"
#include "core/concepts.hpp"
#include "detail/collective_scope.hpp"

namespace tcoll {

/// A machine composed of transports (see the file comment).
template <class C>
concept composite_communicator = !transport<C> && requires(C & c) {
  typename C::default_algorithm;
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  c.begin();
  c.engine_transport();
};

/// Anything collectives run on: a transport or a composed machine.
template <class C>
concept communicator = transport<C> || composite_communicator<C>;

namespace detail {

/// Draws the message spaces of one collective on `c` (throws, naming the cause, if `c` is broken).
template <transport Tr>
int begin_on(Tr& t) {
  return begin_collective(t);
}
template <composite_communicator C>
auto begin_on(C& c) {
  return c.begin();
}

/// What `begin_on` returns for `C`: the message spaces of one collective.
template <class C>
using collective_tags_t = decltype(begin_on(std::declval<C&>()));

/// Calls `f(transport&)` for every transport `c` uses on this rank.
template <transport Tr, class F>
void for_each_transport(Tr& t, F&& f) {
  f(t);
}
template <composite_communicator C, class F>
void for_each_transport(C& c, F&& f) {
  c.for_each_transport(f);
}

/// The transport whose engine runs the collectives queued on `c`.
template <transport Tr>
Tr& engine_transport(Tr& t) {
  return t;
}
template <composite_communicator C>
decltype(auto) engine_transport(C& c) {
  return c.engine_transport();
}

/// Throws the cause if any transport of `c` is broken.
template <communicator C>
void throw_if_broken(C& c) {
  const int rank = c.rank();
  for_each_transport(c, [rank](auto& t) {
    if (collective_context* x = context_of(t)) x->throw_if_broken(rank);
  });
}

/// Marks every transport of `c` broken by `cause` and aborts it (never throws).
template <communicator C>
void fail_communicator(C& c, std::exception_ptr cause) noexcept {
  for_each_transport(c, [&cause](auto& t) { fail_transport(t, cause); });
}

/// Runs `f()`; if it throws, every transport of `c` is failed with the exception, which is
/// rethrown.
template <communicator C, class F>
decltype(auto) guarded_on(C& c, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (...) {
    fail_communicator(c, std::current_exception());
    throw;
  }
}

/// The algorithm-knob type of an allreduce on `C` when the caller names none.
template <class C>
struct default_algorithm {
  using type = automatic;
};
template <composite_communicator C>
struct default_algorithm<C> {
  using type = typename C::default_algorithm;
};
template <class C>
using default_algorithm_t = typename default_algorithm<C>::type;

/// An allreduce on `c` in the message spaces `tags` drawn by `begin_on`, arguments already
/// checked (the caller runs it under `guarded_on`).
template <transport Tr, class T, class Op, class Algo, reducer R>
void allreduce_on(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op,
                  const Algo& algo, R& red) {
  allreduce_tagged(t, tag, sendbuf, recvbuf, count, op, algo, red);
}
template <composite_communicator C, class T, class Op, class Algo, reducer R>
void allreduce_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf,
                  std::size_t count, const Op& op, const Algo& algo, R& red) {
  c.allreduce_tagged(tags, sendbuf, recvbuf, count, op, algo, red);
}

/// Allgather of `count` elements per rank into `recvbuf` (rank order) on `c` in the message
/// spaces `tags`, arguments already checked: the ring allgather on a transport. A composed
/// machine without an allgather of its own gets a sum allreduce of a table that is zero but
/// for this rank's block: twice a ring allgather's traffic, the same bits on every rank (a
/// -0.0 element arrives as +0.0).
template <transport Tr, class T, reducer R>
void allgather_on(Tr& t, int tag, const T* sendbuf, T* recvbuf, std::size_t count, const ring& algo,
                  R& red) {
  allgather_tagged(t, tag, sendbuf, recvbuf, count, algo, red);
}
template <composite_communicator C, class T, reducer R>
void allgather_on(C& c, const collective_tags_t<C>& tags, const T* sendbuf, T* recvbuf,
                  std::size_t count, const ring&, R& red) {
  const std::size_t all = count * static_cast<std::size_t>(c.size());
  const std::vector<T> zeros(all, T(0));
  if constexpr (host_device_copies<R>) // a device reducer's copy may not read host memory
    red.copy_from_host(recvbuf, zeros.data(), all);
  else
    red.copy(recvbuf, zeros.data(), all);
  red.copy(recvbuf + count * static_cast<std::size_t>(c.rank()), sendbuf, count);
  red.synchronize();
  allreduce_on(c, tags, recvbuf, recvbuf, all, sum_op{}, default_algorithm_t<C>{}, red);
}

} // namespace detail

/// Blocking allreduce on a composed communicator (the transports' overloads are in
/// collectives.hpp): the same arguments and checks; a failure breaks every transport it
/// uses. Lets code written for any communicator call `tcoll::allreduce` on it.
template <composite_communicator C, class T, class Op = sum_op,
          class Algo = detail::default_algorithm_t<C>, reducer R = cpu_reducer>
void allreduce(C& comm, const T* sendbuf, T* recvbuf, std::size_t count, const Op& op = {},
               const Algo& algo = {}, R red = {}) {
  detail::check_allreduce_args(sendbuf, recvbuf, count, comm.rank());
  const auto tags = detail::begin_on(comm);
  detail::guarded_on(
      comm, [&] { detail::allreduce_on(comm, tags, sendbuf, recvbuf, count, op, algo, red); });
}

} // namespace tcoll
