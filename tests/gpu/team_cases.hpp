#pragma once
/// \file
/// The foundation's rank-level bodies (tests/common/collective_cases.hpp) on `device_team`
/// with device memory, instantiated once per reducer in its own translation unit.
#include <tcoll/transport/device_team.hpp>

#include "../common/collective_cases.hpp"
#include "device_buffers.hpp"

namespace tcoll::testing {

/// Runs f(transport, buffers) on a device_team of P virtual ranks with reducer Red.
template <class Red, class F>
void on_device_team(int P, F&& f, std::chrono::milliseconds timeout = gpu_timeout) {
  device_team(P, timeout).run([&](device_transport& t) {
    device_buffers<Red> b{t.stream(), t.rank()};
    f(t, b);
  });
}

inline std::vector<std::size_t> gpu_counts(int P) {
  return {0, 1, std::size_t(P > 1 ? P - 1 : 2), std::size_t(P + 1), 1000, 4099};
}

} // namespace tcoll::testing

/// Defines the device_team test cases for reducer type RED (named NAME in test names).
#define TCOLL_DEVICE_TEAM_CASES(RED, NAME)                                                         \
  TEST_CASE(NAME ": allreduce float/half/bfloat16/int32 sum, every algorithm, P = 1..8") {         \
    for (int P : {1, 2, 3, 4, 5, 8}) {                                                             \
      CAPTURE(P);                                                                                  \
      matrix_options opt;                                                                          \
      opt.types = {"float", "half", "bfloat16", "int32"};                                          \
      opt.ops = {"sum"};                                                                           \
      opt.counts = gpu_counts(P);                                                                  \
      on_device_team<RED>(P, [&](auto& t, auto& b) { allreduce_matrix(t, opt, b); });              \
    }                                                                                              \
  }                                                                                                \
  TEST_CASE(NAME ": allreduce every op x every type (P = 3, 8)") {                                 \
    for (int P : {3, 8}) {                                                                         \
      CAPTURE(P);                                                                                  \
      matrix_options opt;                                                                          \
      opt.counts = {7, 1000};                                                                      \
      on_device_team<RED>(P, [&](auto& t, auto& b) { allreduce_matrix(t, opt, b); });              \
    }                                                                                              \
  }                                                                                                \
  TEST_CASE(NAME ": ring with small segments and a large count") {                                 \
    for (int P : {2, 5}) {                                                                         \
      CAPTURE(P);                                                                                  \
      matrix_options opt;                                                                          \
      opt.algorithms = {"ring"};                                                                   \
      opt.types = {"float", "half"};                                                               \
      opt.ops = {"sum", "avg"};                                                                    \
      opt.counts = {(std::size_t{1} << 20) + 3};                                                   \
      opt.ring_segment_bytes = 64 * 1024 + 4;                                                      \
      on_device_team<RED>(P, [&](auto& t, auto& b) { allreduce_matrix(t, opt, b); });              \
    }                                                                                              \
  }                                                                                                \
  TEST_CASE(NAME ": half/bfloat16 rounding, non-commutative op, collectives, symbolic proof") {    \
    for (int P : {1, 2, 3, 6}) {                                                                   \
      CAPTURE(P);                                                                                  \
      on_device_team<RED>(P, [&](auto& t, auto& b) {                                               \
        reduced_precision_rounding(t, {1, 1000}, all_algorithms(), b);                             \
        noncommutative_cases(t, {1, 13}, b);                                                       \
        collectives_values(t, {0, 1, 1001}, 0, b);                                                 \
        symbolic_all(t, 17, b);                                                                    \
      });                                                                                          \
    }                                                                                              \
  }                                                                                                \
  TEST_CASE(NAME ": alltoall(v), gather(v), scatter(v), reduce_scatterv, allgatherv and barrier "  \
                 "on device memory, P = 1..8") {                                                   \
    for (int P : {1, 2, 3, 5, 8}) {                                                                \
      CAPTURE(P);                                                                                  \
      on_device_team<RED>(P, [&](auto& t, auto& b) {                                               \
        alltoall_values(t, {0, 1, std::size_t(P + 1), 1000}, b);                                   \
        gather_scatter_values(t, {1, 1000}, b);                                                    \
        uneven_block_values(t, {0, 1, 1000}, b);                                                   \
        barrier_waits_for_every_rank(t, dissemination{}, b);                                       \
      });                                                                                          \
    }                                                                                              \
  }                                                                                                \
  TEST_CASE(NAME ": bad input throws invalid_argument; an absent peer times out") {                \
    on_device_team<RED>(3, [&](auto& t, auto& b) { bad_input_cases(t, b); });                      \
    on_device_team<RED>(                                                                           \
        3, [&](auto& t, auto& b) { absent_peer_case(t, 1, ring{}, 1000, b); },                     \
        std::chrono::milliseconds(300));                                                           \
  }
