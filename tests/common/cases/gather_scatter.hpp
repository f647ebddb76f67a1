#pragma once
/// \file
/// Shared rank-level test bodies, topic: gather, gatherv, scatter, scatterv (host memory) to
/// and from every root, fractional values, a block of its own size per rank with gaps, in
/// place at the root, and bad input at every rank that fails before any message. (one of
/// the topics of tests/common/collective_cases.hpp; see that file for the rules every body
/// follows).
#include "alltoall.hpp"

namespace tcoll::testing {

template <transport Tr>
void gather_scatter_values(Tr& t, const std::vector<std::size_t>& counts) {
  const int P = t.size(), rank = t.rank();
  const auto p = static_cast<std::size_t>(P);
  for (std::size_t n : counts)
    for (int root = 0; root < P; ++root) {
      const std::string at_root = "(root=" + std::to_string(root) + ")";
      // gather and scatter, out of place and in place at the root
      for (int ip = 0; ip < 2; ++ip) {
        const bool in_place = ip == 1 && rank == root;
        {
          std::vector<double> mine(n), want(n * p), buf(n * p, -1.0);
          for (std::size_t k = 0; k < n; ++k) mine[k] = exchanged_value(rank, root, k);
          for (int q = 0; q < P; ++q)
            for (std::size_t k = 0; k < n; ++k) want[q * n + k] = exchanged_value(q, root, k);
          const case_id id{"gather" + at_root, "double", "-", n, P, rank, in_place};
          if (in_place) std::copy(mine.begin(), mine.end(), buf.begin() + rank * n);
          const double* send = in_place ? buf.data() + rank * n : mine.data();
          const std::vector<double> input = mine;
          gather(t, send, rank == root ? buf.data() : nullptr, n, root);
          if (rank == root) check_equal(buf, want, id.str());
          check_equal(mine, input, id.str() + " (input must stay untouched)");
        }
        {
          std::vector<double> all(n * p), mine(n, -1.0), want(n);
          for (int q = 0; q < P; ++q)
            for (std::size_t k = 0; k < n; ++k) all[q * n + k] = exchanged_value(root, q, k);
          for (std::size_t k = 0; k < n; ++k) want[k] = exchanged_value(root, rank, k);
          const case_id id{"scatter" + at_root, "double", "-", n, P, rank, in_place};
          const std::vector<double> input = all;
          double* recv = in_place ? all.data() + rank * n : mine.data();
          scatter(t, static_cast<const double*>(rank == root ? all.data() : nullptr), recv, n,
                  root);
          check_equal(std::vector<double>(recv, recv + n), want, id.str());
          if (!in_place) check_equal(all, input, id.str() + " (input must stay untouched)");
        }
      }
      // gatherv and scatterv: rank q's block has c(q) = n + (q * 3) % 4 elements, laid out at
      // the root in reverse rank order with a gap of 2 before each; gaps stay unwritten
      auto c = [&](int q) { return n + static_cast<std::size_t>((q * 3) % 4); };
      std::vector<std::size_t> block_counts(p), displs(p);
      std::size_t at = 0;
      for (int q = P - 1; q >= 0; --q) {
        at += 2;
        block_counts[q] = c(q);
        displs[q] = at;
        at += c(q);
      }
      {
        std::vector<double> mine(c(rank)), buf(at, -2.0), want(at, -2.0);
        for (std::size_t k = 0; k < mine.size(); ++k) mine[k] = exchanged_value(rank, root, k);
        for (int q = 0; q < P; ++q)
          for (std::size_t k = 0; k < c(q); ++k) want[displs[q] + k] = exchanged_value(q, root, k);
        const case_id id{"gatherv" + at_root, "double", "-", n, P, rank, false};
        gatherv(t, static_cast<const double*>(mine.data()), mine.size(), buf.data(), block_counts,
                displs, root);
        if (rank == root) check_equal(buf, want, id.str());
      }
      {
        std::vector<double> all(at, -3.0), mine(c(rank), -1.0), want(c(rank));
        for (int q = 0; q < P; ++q)
          for (std::size_t k = 0; k < c(q); ++k) all[displs[q] + k] = exchanged_value(root, q, k);
        for (std::size_t k = 0; k < want.size(); ++k) want[k] = exchanged_value(root, rank, k);
        const case_id id{"scatterv" + at_root, "double", "-", n, P, rank, false};
        const std::vector<double> input = all;
        scatterv(t, static_cast<const double*>(all.data()), block_counts, displs, mine.data(),
                 mine.size(), root);
        check_equal(mine, want, id.str());
        check_equal(all, input, id.str() + " (input must stay untouched)");
      }
    }
  // bad input, alike on every rank, before any message; the transport keeps working
  std::vector<double> a(4 * p), b(4 * p);
  CHECK(error_of([&] {
          gather(t, static_cast<const double*>(a.data()), b.data(), 1, P);
        }).find("root") != std::string::npos);
  CHECK(error_of([&] {
          scatter(t, static_cast<const double*>(a.data()), static_cast<double*>(nullptr), 1, 0);
        }).find("recvbuf") != std::string::npos);
  gather(t, static_cast<const double*>(a.data()), b.data(), 1, 0); // still working
}

} // namespace tcoll::testing
