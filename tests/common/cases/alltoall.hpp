#pragma once
/// \file
/// Shared rank-level test bodies, topic: alltoall and alltoallv on the memory of a `Buffers`
/// policy: fractional values, uneven blocks with gaps, in place, and bad input that fails
/// before any message.
/// (one of the topics of tests/common/collective_cases.hpp; see that file for the rules every
/// body follows).
#include "collectives.hpp"

namespace tcoll::testing {

/// The value rank `from` sends rank `to` at element k of their block: fractional, distinct
/// for every (from, to, k), exact in double.
inline double exchanged_value(int from, int to, std::size_t k) {
  return 0.5 + from + 0.25 * to + static_cast<double>(k) / 1024.0;
}

/// `host` copied into a new buffer of `b` (device memory for the GPU suite).
template <class Buffers, class T>
auto placed(const Buffers& b, const std::vector<T>& host) {
  auto buf = b.template allocate<T>(host.size());
  b.upload(buf, host);
  return buf;
}

/// alltoall by every algorithm and alltoallv with uneven blocks and gaps, out of place and
/// in place, on the memory of `b` with its reducer (host memory by default).
template <transport Tr, class Buffers = host_buffers>
void alltoall_values(Tr& t, const std::vector<std::size_t>& counts, const Buffers& b = {}) {
  const int P = t.size(), rank = t.rank();
  const auto p = static_cast<std::size_t>(P);
  auto red = b.reducer();
  for (std::size_t n : counts) {
    // alltoall: out of place and in place, by every algorithm (the default chooses by size)
    auto alltoall_by = [&](const auto& algo, std::string_view name) {
      for (int ip = 0; ip < 2; ++ip) {
        std::vector<double> send(n * p), want(n * p);
        for (int q = 0; q < P; ++q)
          for (std::size_t k = 0; k < n; ++k) {
            send[q * n + k] = exchanged_value(rank, q, k);
            want[q * n + k] = exchanged_value(q, rank, k);
          }
        const case_id id{"alltoall " + std::string(name), "double", "-", n, P, rank, ip == 1};
        if (ip == 1) {
          auto buf = placed(b, send);
          alltoall(t, static_cast<const double*>(buf.data()), buf.data(), n, algo, red);
          check_equal(b.download(buf, n * p), want, id.str());
        } else {
          auto in = placed(b, send);
          auto recv = placed(b, std::vector<double>(n * p, -1.0));
          alltoall(t, static_cast<const double*>(in.data()), recv.data(), n, algo, red);
          check_equal(b.download(recv, n * p), want, id.str());
          check_equal(b.download(in, n * p), send, id.str() + " (input must stay untouched)");
        }
      }
    };
    alltoall_by(alltoall_by_size{}, "automatic");
    // every algorithm the table lists for it
    for_each_algorithm<collective::alltoall>(
        [&]<class A>(const A& algo) { alltoall_by(algo, A::name); });
    alltoall_by(pairwise_exchange{.all_posted_max_bytes = 0}, "pairwise_exchange step by step");
    // alltoallv: rank r sends q c(r, q) = n + (2r + q) % 4 elements (so a pair's two
    // directions differ), its send blocks in rank order with a gap of q elements before
    // block q, its receive blocks in reverse rank order with a gap of 1; gaps stay unwritten
    auto c = [&](int from, int to) { return n + static_cast<std::size_t>((2 * from + to) % 4); };
    for (int ip = 0; ip < 3; ++ip) {
      std::vector<std::size_t> send_counts(p), send_displs(p), recv_counts(p), recv_displs(p);
      std::size_t at = 0;
      for (int q = 0; q < P; ++q) {
        at += static_cast<std::size_t>(q);
        send_counts[q] = c(rank, q);
        send_displs[q] = at;
        at += send_counts[q];
      }
      const std::size_t send_extent = at;
      at = 0;
      for (int q = P - 1; q >= 0; --q) {
        at += 1;
        recv_counts[q] = c(q, rank);
        recv_displs[q] = at;
        at += recv_counts[q];
      }
      const std::size_t recv_extent = at;
      const case_id id{
          ip == 2 ? "alltoallv, two layouts" : "alltoallv", "double", "-", n, P, rank, ip > 0};
      if (ip == 2) {
        // in place with a send layout and a receive layout of their own (tcoll's form): the
        // blocks above in one buffer of the larger extent; a receive block may cover send
        // blocks that have not left yet, so every receive block must hold its peer's block
        std::vector<double> host(std::max(send_extent, recv_extent), -3.0);
        for (int q = 0; q < P; ++q)
          for (std::size_t k = 0; k < send_counts[q]; ++k)
            host[send_displs[q] + k] = exchanged_value(rank, q, k);
        auto buf = placed(b, host);
        alltoallv(t, static_cast<const double*>(buf.data()), send_counts, send_displs, buf.data(),
                  recv_counts, recv_displs, pairwise_exchange{}, red);
        const std::vector<double> got = b.download(buf, host.size());
        std::vector<double> got_blocks, want_blocks;
        for (int q = 0; q < P; ++q)
          for (std::size_t k = 0; k < recv_counts[q]; ++k) {
            got_blocks.push_back(got[recv_displs[q] + k]);
            want_blocks.push_back(exchanged_value(q, rank, k));
          }
        check_equal(got_blocks, want_blocks, id.str());
      } else if (ip == 1) {
        // in place (MPI_IN_PLACE's form: block q is sent from where q's block lands), which
        // needs the counts of a pair to agree both ways: s(r, q) = n + (r + q) % 3, the
        // blocks in reverse rank order with a gap of 1
        at = 0;
        for (int q = P - 1; q >= 0; --q) {
          at += 1;
          recv_counts[q] = n + static_cast<std::size_t>((rank + q) % 3);
          recv_displs[q] = at;
          at += recv_counts[q];
        }
        std::vector<double> host(at, -2.0), want(at, -2.0);
        for (int q = 0; q < P; ++q)
          for (std::size_t k = 0; k < recv_counts[q]; ++k) {
            host[recv_displs[q] + k] = exchanged_value(rank, q, k);
            want[recv_displs[q] + k] = exchanged_value(q, rank, k);
          }
        auto buf = placed(b, host);
        alltoallv(t, static_cast<const double*>(buf.data()), recv_counts, recv_displs, buf.data(),
                  recv_counts, recv_displs, pairwise_exchange{}, red);
        check_equal(b.download(buf, at), want, id.str());
      } else {
        std::vector<double> send(send_extent, -3.0), want(recv_extent, -2.0);
        for (int q = 0; q < P; ++q) {
          for (std::size_t k = 0; k < send_counts[q]; ++k)
            send[send_displs[q] + k] = exchanged_value(rank, q, k);
          for (std::size_t k = 0; k < recv_counts[q]; ++k)
            want[recv_displs[q] + k] = exchanged_value(q, rank, k);
        }
        auto in = placed(b, send);
        auto recv = placed(b, std::vector<double>(recv_extent, -2.0));
        alltoallv(t, static_cast<const double*>(in.data()), send_counts, send_displs, recv.data(),
                  recv_counts, recv_displs, pairwise_exchange{}, red);
        check_equal(b.download(recv, recv_extent), want, id.str());
        check_equal(b.download(in, send_extent), send, id.str() + " (input must stay untouched)");
      }
    }
  }
  // bad input, alike on every rank: it fails before any message, naming the argument, and
  // leaves the transport working
  auto a = b.template allocate<double>(4 * p);
  auto out = b.template allocate<double>(4 * p);
  const double* from = a.data();
  std::vector<std::size_t> ones(p, 1), displs(p);
  for (int q = 0; q < P; ++q) displs[q] = static_cast<std::size_t>(q);
  const std::vector<std::size_t> short_counts(p + 1, 1);
  CHECK(error_of([&] {
          alltoallv(t, from, short_counts, displs, out.data(), ones, displs, {}, red);
        }).find("send_counts") != std::string::npos);
  std::vector<std::size_t> more = ones;
  more[static_cast<std::size_t>(rank)] = 2;
  CHECK(error_of([&] {
          alltoallv(t, from, more, displs, out.data(), ones, displs, {}, red);
        }).find("this rank's block to itself") != std::string::npos);
  CHECK(error_of([&] {
          alltoall(t, from, a.data() + 1, 2, alltoall_by_size{}, red);
        }).find("overlap") != std::string::npos);
  std::vector<double> host(p);
  for (int q = 0; q < P; ++q) host[q] = exchanged_value(rank, q, 0);
  b.upload(a, host);
  alltoall(t, from, out.data(), 1, alltoall_by_size{}, red); // still working
  const std::vector<double> got = b.download(out, p);
  for (int q = 0; q < P; ++q)
    CHECK_MESSAGE(got[q] == exchanged_value(q, rank, 0),
                  "alltoall after bad input: rank " << rank << " block " << q);
}

} // namespace tcoll::testing
