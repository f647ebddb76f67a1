#pragma once
/// \file
/// Shared rank-level test bodies, topic: reduce_scatterv and allgatherv, a block of its own
/// size per rank (empty ones too): fractional values against references built from every
/// rank's input, sum and avg, each rank its own displacements with gaps that stay
/// unwritten, allgatherv in place, untouched inputs, and bad input that fails before any
/// message. On any communicator (a transport or a hierarchical machine). (one of the topics
/// of tests/common/collective_cases.hpp; see that file for the rules every body follows).
#include "barrier.hpp"

namespace tcoll::testing {

/// The blocks' sizes of pattern `pattern` around `n`: 0 grows with the rank, 1 leaves every
/// other block empty (the first one too).
inline std::vector<std::size_t> uneven_counts(int P, std::size_t n, int pattern) {
  std::vector<std::size_t> c(static_cast<std::size_t>(P));
  for (int q = 0; q < P; ++q)
    c[static_cast<std::size_t>(q)] = pattern == 0 ? n + static_cast<std::size_t>((q * 3) % 4)
                                     : q % 2 == 0 ? 0
                                                  : n + static_cast<std::size_t>(q);
  return c;
}

template <class C>
void uneven_block_values(C& c, const std::vector<std::size_t>& sizes) {
  const int P = c.size(), rank = c.rank();
  const auto p = static_cast<std::size_t>(P), me = static_cast<std::size_t>(rank);
  for (std::size_t n : sizes)
    for (int pattern : {0, 1}) {
      const std::vector<std::size_t> counts = uneven_counts(P, n, pattern);
      std::vector<std::size_t> offsets(p);
      std::size_t total = 0;
      for (std::size_t q = 0; q < p; ++q) {
        offsets[q] = total;
        total += counts[q];
      }
      const std::string shape = "(pattern " + std::to_string(pattern) + ")";
      // reduce_scatterv, sum and avg: the dyadic fractions of exchanged_value add up exactly
      // in any order, so the reference is exact too
      for (bool average : {false, true}) {
        std::vector<double> send(total), got(counts[me], -1.0), want(counts[me]);
        for (std::size_t q = 0; q < p; ++q)
          for (std::size_t k = 0; k < counts[q]; ++k)
            send[offsets[q] + k] = exchanged_value(rank, static_cast<int>(q), k);
        for (std::size_t k = 0; k < counts[me]; ++k) {
          double s = 0;
          for (int from = 0; from < P; ++from) s += exchanged_value(from, rank, k);
          want[k] = average ? s / P : s;
        }
        const std::vector<double> input = send;
        const case_id id{
            "reduce_scatterv" + shape, "double", average ? "avg" : "sum", n, P, rank, false};
        if (average)
          reduce_scatterv(c, static_cast<const double*>(send.data()), got.data(), counts, avg_op{});
        else
          reduce_scatterv(c, static_cast<const double*>(send.data()), got.data(), counts);
        check_equal(got, want, id.str());
        check_equal(send, input, id.str() + " (input must stay untouched)");
      }
      // allgatherv: each rank lays the blocks out in reverse rank order behind gaps of its
      // own width (1 or 2), so every rank's displacements differ; out of place and in place
      for (bool in_place : {false, true}) {
        const std::size_t gap = 1 + me % 2;
        std::vector<std::size_t> displs(p);
        std::size_t at = 0;
        for (int q = P - 1; q >= 0; --q) {
          at += gap;
          displs[static_cast<std::size_t>(q)] = at;
          at += counts[static_cast<std::size_t>(q)];
        }
        std::vector<double> mine(counts[me]), buf(at, -2.0), want(at, -2.0);
        for (std::size_t k = 0; k < counts[me]; ++k) mine[k] = exchanged_value(rank, 0, k);
        for (std::size_t q = 0; q < p; ++q)
          for (std::size_t k = 0; k < counts[q]; ++k)
            want[displs[q] + k] = exchanged_value(static_cast<int>(q), 0, k);
        if (in_place) std::copy(mine.begin(), mine.end(), buf.begin() + displs[me]);
        const double* send = in_place ? buf.data() + displs[me] : mine.data();
        const std::vector<double> input = mine;
        const case_id id{"allgatherv" + shape, "double", "-", n, P, rank, in_place};
        allgatherv(c, send, counts[me], buf.data(), counts, displs);
        check_equal(buf, want, id.str());
        check_equal(mine, input, id.str() + " (input must stay untouched)");
      }
    }
  // bad input, alike on every rank, before any message; the communicator keeps working
  std::vector<double> a(4 * p + 4), b(4 * p + 4);
  const std::vector<std::size_t> ones(p, 1), short_counts(p > 1 ? p - 1 : 2, 1);
  std::vector<std::size_t> displs(p);
  for (std::size_t q = 0; q < p; ++q) displs[q] = 2 * q;
  CHECK(error_of([&] {
          reduce_scatterv(c, static_cast<const double*>(a.data()), b.data(), short_counts);
        }).find("recv_counts has") != std::string::npos);
  CHECK(error_of([&] {
          reduce_scatterv(c, static_cast<const double*>(a.data()), a.data(), ones);
        }).find("overlap") != std::string::npos);
  CHECK(error_of([&] {
          allgatherv(c, static_cast<const double*>(a.data()), 2, b.data(), ones, displs);
        }).find("send_count") != std::string::npos);
  if (P > 1) {
    std::vector<std::size_t> overlapping = displs;
    overlapping[1] = 0; // blocks of 2 elements at 0 and 0
    const std::vector<std::size_t> twos(p, 2);
    CHECK(error_of([&] {
            allgatherv(c, static_cast<const double*>(a.data()), 2, b.data(), twos, overlapping);
          }).find("overlap in recvbuf") != std::string::npos);
  }
  allgatherv(c, static_cast<const double*>(a.data()), 1, b.data(), ones, displs); // still working
}

} // namespace tcoll::testing
