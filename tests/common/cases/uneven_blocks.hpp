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

template <class C, class Buffers = host_buffers>
void uneven_block_values(C& c, const std::vector<std::size_t>& sizes, const Buffers& b = {}) {
  const int P = c.size(), rank = c.rank();
  const auto p = static_cast<std::size_t>(P), me = static_cast<std::size_t>(rank);
  auto red = b.reducer();
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
        std::vector<double> send(total), want(counts[me]);
        for (std::size_t q = 0; q < p; ++q)
          for (std::size_t k = 0; k < counts[q]; ++k)
            send[offsets[q] + k] = exchanged_value(rank, static_cast<int>(q), k);
        for (std::size_t k = 0; k < counts[me]; ++k) {
          double s = 0;
          for (int from = 0; from < P; ++from) s += exchanged_value(from, rank, k);
          want[k] = average ? s / P : s;
        }
        auto in = placed(b, send);
        auto got = placed(b, std::vector<double>(counts[me], -1.0));
        const case_id id{
            "reduce_scatterv" + shape, "double", average ? "avg" : "sum", n, P, rank, false};
        if (average)
          reduce_scatterv(c, static_cast<const double*>(in.data()), got.data(), counts, avg_op{},
                          ring{}, red);
        else
          reduce_scatterv(c, static_cast<const double*>(in.data()), got.data(), counts, sum_op{},
                          ring{}, red);
        check_equal(b.download(got, counts[me]), want, id.str());
        check_equal(b.download(in, total), send, id.str() + " (input must stay untouched)");
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
        std::vector<double> mine(counts[me]), host(at, -2.0), want(at, -2.0);
        for (std::size_t k = 0; k < counts[me]; ++k) mine[k] = exchanged_value(rank, 0, k);
        for (std::size_t q = 0; q < p; ++q)
          for (std::size_t k = 0; k < counts[q]; ++k)
            want[displs[q] + k] = exchanged_value(static_cast<int>(q), 0, k);
        if (in_place) std::copy(mine.begin(), mine.end(), host.begin() + displs[me]);
        auto buf = placed(b, host);
        auto in = placed(b, mine);
        const double* send = in_place ? buf.data() + displs[me] : in.data();
        const case_id id{"allgatherv" + shape, "double", "-", n, P, rank, in_place};
        allgatherv(c, send, counts[me], buf.data(), counts, displs, ring{}, red);
        check_equal(b.download(buf, at), want, id.str());
        check_equal(b.download(in, counts[me]), mine, id.str() + " (input must stay untouched)");
      }
    }
  // bad input, alike on every rank, before any message; the communicator keeps working
  auto a = b.template allocate<double>(4 * p + 4);
  auto out = b.template allocate<double>(4 * p + 4);
  const double* from = a.data();
  const std::vector<std::size_t> ones(p, 1), short_counts(p > 1 ? p - 1 : 2, 1);
  std::vector<std::size_t> displs(p);
  for (std::size_t q = 0; q < p; ++q) displs[q] = 2 * q;
  CHECK(error_of([&] {
          reduce_scatterv(c, from, out.data(), short_counts, sum_op{}, ring{}, red);
        }).find("recv_counts has") != std::string::npos);
  CHECK(error_of([&] {
          reduce_scatterv(c, from, a.data(), ones, sum_op{}, ring{}, red);
        }).find("overlap") != std::string::npos);
  CHECK(error_of([&] {
          allgatherv(c, from, 2, out.data(), ones, displs, ring{}, red);
        }).find("send_count") != std::string::npos);
  if (P > 1) {
    std::vector<std::size_t> overlapping = displs;
    overlapping[1] = 0; // blocks of 2 elements at 0 and 0
    const std::vector<std::size_t> twos(p, 2);
    CHECK(error_of([&] {
            allgatherv(c, from, 2, out.data(), twos, overlapping, ring{}, red);
          }).find("overlap in recvbuf") != std::string::npos);
  }
  b.upload(a, std::vector<double>{exchanged_value(rank, 0, 0)});
  allgatherv(c, from, 1, out.data(), ones, displs, ring{}, red); // still working
  const std::vector<double> got = b.download(out, 2 * p);
  for (std::size_t q = 0; q < p; ++q)
    CHECK_MESSAGE(got[2 * q] == exchanged_value(static_cast<int>(q), 0, 0),
                  "allgatherv after bad input: rank " << rank << " block " << q);
}

} // namespace tcoll::testing
