#pragma once
/// \file
/// Shared rank-level test bodies, topic: gather, gatherv, scatter, scatterv (on the memory of
/// a `Buffers` policy) to and from every root, fractional values, a block of its own size per rank
/// with gaps, in place at the root, and bad input at every rank that fails before any message. (one
/// of the topics of tests/common/collective_cases.hpp; see that file for the rules every body
/// follows).
#include "alltoall.hpp"

namespace tcoll::testing {

template <transport Tr, class Buffers = host_buffers>
void gather_scatter_values(Tr& t, const std::vector<std::size_t>& counts, const Buffers& b = {}) {
  const int P = t.size(), rank = t.rank();
  const auto p = static_cast<std::size_t>(P);
  auto red = b.reducer();
  for (std::size_t n : counts)
    for (int root = 0; root < P; ++root) {
      const std::string at_root = "(root=" + std::to_string(root) + ")";
      // gather and scatter, out of place and in place at the root
      for (int ip = 0; ip < 2; ++ip) {
        const bool in_place = ip == 1 && rank == root;
        {
          std::vector<double> mine(n), want(n * p), host(n * p, -1.0);
          for (std::size_t k = 0; k < n; ++k) mine[k] = exchanged_value(rank, root, k);
          for (int q = 0; q < P; ++q)
            for (std::size_t k = 0; k < n; ++k) want[q * n + k] = exchanged_value(q, root, k);
          const case_id id{"gather" + at_root, "double", "-", n, P, rank, in_place};
          if (in_place) std::copy(mine.begin(), mine.end(), host.begin() + rank * n);
          auto buf = placed(b, host);
          auto in = placed(b, mine);
          const double* send = in_place ? buf.data() + rank * n : in.data();
          gather(t, send, rank == root ? buf.data() : nullptr, n, root, linear{}, red);
          if (rank == root) check_equal(b.download(buf, n * p), want, id.str());
          check_equal(b.download(in, n), mine, id.str() + " (input must stay untouched)");
        }
        {
          std::vector<double> all(n * p), want(n);
          for (int q = 0; q < P; ++q)
            for (std::size_t k = 0; k < n; ++k) all[q * n + k] = exchanged_value(root, q, k);
          for (std::size_t k = 0; k < n; ++k) want[k] = exchanged_value(root, rank, k);
          const case_id id{"scatter" + at_root, "double", "-", n, P, rank, in_place};
          auto source = placed(b, all);
          auto mine = placed(b, std::vector<double>(n, -1.0));
          double* recv = in_place ? source.data() + rank * n : mine.data();
          scatter(t, static_cast<const double*>(rank == root ? source.data() : nullptr), recv, n,
                  root, linear{}, red);
          const std::vector<double> got = b.download(source, n * p);
          if (in_place)
            check_equal(std::vector<double>(got.begin() + rank * n, got.begin() + (rank + 1) * n),
                        want, id.str());
          else
            check_equal(b.download(mine, n), want, id.str());
          if (!in_place) check_equal(got, all, id.str() + " (input must stay untouched)");
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
        std::vector<double> mine(c(rank)), want(at, -2.0);
        for (std::size_t k = 0; k < mine.size(); ++k) mine[k] = exchanged_value(rank, root, k);
        for (int q = 0; q < P; ++q)
          for (std::size_t k = 0; k < c(q); ++k) want[displs[q] + k] = exchanged_value(q, root, k);
        const case_id id{"gatherv" + at_root, "double", "-", n, P, rank, false};
        auto in = placed(b, mine);
        auto buf = placed(b, std::vector<double>(at, -2.0));
        gatherv(t, static_cast<const double*>(in.data()), mine.size(), buf.data(), block_counts,
                displs, root, linear{}, red);
        if (rank == root) check_equal(b.download(buf, at), want, id.str());
      }
      {
        std::vector<double> all(at, -3.0), want(c(rank));
        for (int q = 0; q < P; ++q)
          for (std::size_t k = 0; k < c(q); ++k) all[displs[q] + k] = exchanged_value(root, q, k);
        for (std::size_t k = 0; k < want.size(); ++k) want[k] = exchanged_value(root, rank, k);
        const case_id id{"scatterv" + at_root, "double", "-", n, P, rank, false};
        auto source = placed(b, all);
        auto mine = placed(b, std::vector<double>(c(rank), -1.0));
        scatterv(t, static_cast<const double*>(source.data()), block_counts, displs, mine.data(),
                 want.size(), root, linear{}, red);
        check_equal(b.download(mine, want.size()), want, id.str());
        check_equal(b.download(source, at), all, id.str() + " (input must stay untouched)");
      }
    }
  // bad input, alike on every rank, before any message; the transport keeps working
  auto a = b.template allocate<double>(4 * p);
  auto out = b.template allocate<double>(4 * p);
  const double* from = a.data();
  CHECK(error_of([&] { gather(t, from, out.data(), 1, P, linear{}, red); }).find("root") !=
        std::string::npos);
  CHECK(error_of([&] {
          scatter(t, from, static_cast<double*>(nullptr), 1, 0, linear{}, red);
        }).find("recvbuf") != std::string::npos);
  b.upload(a, std::vector<double>{exchanged_value(rank, 0, 0)});
  gather(t, from, out.data(), 1, 0, linear{}, red); // still working
  if (rank == 0) {
    const std::vector<double> got = b.download(out, p);
    for (int q = 0; q < P; ++q)
      CHECK_MESSAGE(got[q] == exchanged_value(q, 0, 0), "gather after bad input: block " << q);
  }
}

} // namespace tcoll::testing
