#pragma once
/// \file
/// Shared rank-level test bodies, topic: barrier: no rank leaves before the last one has
/// arrived, whichever rank comes late. (one of the topics of tests/common/collective_cases.hpp;
/// see that file for the rules every body follows).
#include <chrono>
#include <thread>

#include "gather_scatter.hpp"

namespace tcoll::testing {

template <transport Tr, class Algo = dissemination, class Buffers = host_buffers>
void barrier_waits_for_every_rank(Tr& t, const Algo& algo = {}, const Buffers& b = {}) {
  const int P = t.size(), rank = t.rank();
  auto red = b.reducer();
  // steady_clock is CLOCK_MONOTONIC: one clock for every thread and process of the machine
  auto now_us = [] {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  for (int late = 0; late < P; ++late) {
    if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const double enter = now_us();
    barrier(t, algo, red);
    const double leave = now_us();
    // every rank's arrival, gathered in the memory of `b` (the barrier's own memory)
    auto mine = placed(b, std::vector<double>{enter});
    auto all = b.template allocate<double>(static_cast<std::size_t>(P));
    allgather(t, static_cast<const double*>(mine.data()), all.data(), 1, ring{}, red);
    const std::vector<double> enters = b.download(all, static_cast<std::size_t>(P));
    const double last = *std::max_element(enters.begin(), enters.end());
    CHECK_MESSAGE(leave >= last, "barrier: rank " << rank << " of " << P << " left at " << leave
                                                  << " us, before rank " << late << " arrived at "
                                                  << last << " us");
  }
}

} // namespace tcoll::testing
