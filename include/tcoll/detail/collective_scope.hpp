#pragma once
/// \file
/// How an entry point opens a collective on a transport: draw its message space (tag) from
/// the transport's `collective_context`, run it, and on any failure mark the transport
/// broken and abort it (which tells the peers: team-wide on in-process transports, a
/// control message on MPI), then rethrow.
#include <exception>
#include <utility>

#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"
#include "../core/tags.hpp"

namespace tcoll::detail {

/// Tag of every collective on a transport without a `collective_context` (a user's own
/// transport): one collective at a time, as before message spaces existed.
inline constexpr int collective_tag = tags::single_collective;

/// The context of `t`, or null for a transport without one.
template <class Tr>
collective_context* context_of(Tr& t) noexcept {
  if constexpr (has_collective_context<Tr>)
    return &t.collectives();
  else
    return nullptr;
}

/// Starts a collective on `t`: throws, naming the cause, if `t` is broken, else returns its tag.
template <class Tr>
int begin_collective(Tr& t) {
  if (collective_context* c = context_of(t)) return c->begin(t.rank());
  return collective_tag;
}

/// Marks `t` broken by `cause` and aborts it (never throws).
template <class Tr>
void fail_transport(Tr& t, std::exception_ptr cause) noexcept {
  if (collective_context* c = context_of(t)) c->fail(cause);
  t.abort();
}

/// Runs `f()`; if it throws, `t` is failed with the exception, which is rethrown.
template <class Tr, class F>
decltype(auto) guarded(Tr& t, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (...) {
    fail_transport(t, std::current_exception());
    throw;
  }
}

} // namespace tcoll::detail
