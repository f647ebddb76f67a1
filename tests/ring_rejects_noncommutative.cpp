// Compile-time check, compiled (syntax only) by two meson tests: with a commutative op it
// must compile; with -DTCOLL_EXPECT_REJECTION the non-commutative op must be rejected by
// ring's static_assert ("reorders operands"). A requires-expression cannot observe a
// static_assert in a function body, so the check runs the compiler itself.
#include <tcoll/tcoll.hpp>

void ring_with_user_op(tcoll::thread_transport& t, unsigned* p) {
#ifdef TCOLL_EXPECT_REJECTION
  const auto op = tcoll::make_op<false>([](auto a, auto b) { return a * 3 + b; });
#else
  const auto op = tcoll::make_op<true>([](auto a, auto b) { return a + b; });
#endif
  tcoll::allreduce(t, p, p, 4, op, tcoll::ring{});
}

// The order-keeping algorithms accept the same non-commutative op.
void tree_with_noncommutative_op(tcoll::thread_transport& t, unsigned* p) {
  const auto op = tcoll::make_op<false>([](auto a, auto b) { return a * 3 + b; });
  tcoll::allreduce(t, p, p, 4, op, tcoll::recursive_doubling{});
  tcoll::allreduce(t, p, p, 4, op, tcoll::recursive_halving_doubling{});
  tcoll::allreduce(t, p, p, 4, op, tcoll::binomial_tree{});
  tcoll::allreduce(t, p, p, 4, op, tcoll::automatic{});
  tcoll::reduce(t, p, p, 4, 0, op);
}
