#pragma once
/// \file
/// The measurement loop of bench/allreduce_perf, templated over the transport (one
/// translation unit per transport instantiates it, so they compile in parallel).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <tcoll/collectives.hpp>

#include "perf_check.hpp"
#include "perf_options.hpp"
#include "perf_report.hpp"

namespace tcoll::bench {

/// The element type named `name` (`name_of`: "float", "half", "int32", ...).
inline scalar_type parse_dtype(const std::string& name) {
  for (int t = 0; t < scalar_type_count; ++t)
    if (name_of(static_cast<scalar_type>(t)) == name) return static_cast<scalar_type>(t);
  throw invalid_argument("allreduce_perf: unknown dtype " + name);
}

/// The reduction named `name`: sum, prod, min, max or avg (the ones the check knows).
inline reduce_kind parse_op(const std::string& name) {
  for (reduce_kind k :
       {reduce_kind::sum, reduce_kind::prod, reduce_kind::min, reduce_kind::max, reduce_kind::avg})
    if (name_of(k) == name) return k;
  throw invalid_argument("allreduce_perf: unknown op " + name);
}

/// Does transport `Tr` offer a vendor allreduce on the runtime-typed path (the same for
/// every element size)?
template <class Tr>
inline constexpr bool has_native_runtime_allreduce =
    has_native_allreduce<Tr, raw_element<4>, runtime_op>;

/// Calls f(algorithm struct) for the algorithm named `name` (`automatic` or a name of
/// `parse_algorithm`), with the knobs of `o`.
template <class F>
void with_algorithm(const std::string& name, const perf_options& o, F&& f) {
  automatic knobs{.rules = {}}; // multi_ring: its default 2 rings in alternate directions
  if (o.segment_bytes) {
    knobs.ring_knobs.max_segment_bytes = o.segment_bytes;
    knobs.multi_ring_knobs.max_segment_bytes = o.segment_bytes;
  }
  if (name == "automatic") {
    automatic a{};
    a.ring_knobs = knobs.ring_knobs;
    a.multi_ring_knobs = knobs.multi_ring_knobs;
    return f(a);
  }
  visit_algorithm(parse_algorithm(name, collective::allreduce), knobs, f);
}

/// Maximum of a double over the ranks of `t` (tcoll's own allreduce, so it works on
/// every transport).
template <class Tr>
double max_over_ranks(Tr& t, double v) {
  allreduce(t, &v, &v, 1, max_op{}, recursive_doubling{});
  return v;
}
template <class Tr>
long long sum_over_ranks(Tr& t, long long v) {
  allreduce(t, &v, &v, 1, sum_op{}, recursive_doubling{});
  return v;
}

/// Times one (algorithm, size, placement) on `t`; returns the median over reps of the
/// per-call time (max over ranks) in microseconds and the number of wrong elements over all
/// ranks. `ctl`, a transport over the same ranks in the same order, runs the barrier before
/// each repetition and the reductions of times and wrong counts (`t` itself below; the
/// whole job's `mpi_transport` for a two-level machine, which has no barrier of its own).
/// The calls take the runtime-typed path (one instantiation per element size), whose
/// results are the typed path's bit for bit.
template <class Tr, class Ctl, class Algo>
measurement measure_on(Tr& t, Ctl& ctl, const perf_options& o, const Algo& algo, scalar_type type,
                       reduce_kind kind, void* send, void* recv, std::size_t count, bool in_place) {
  const int P = t.size(), r = t.rank();
  const std::size_t bytes = count * size_of(type);
  auto call = [&] {
    allreduce(t, in_place ? static_cast<const void*>(recv) : send, recv, count, type, kind, algo);
  };
  fill_input(type, kind, send, count, r);
  if (in_place) std::memcpy(recv, send, bytes);
  for (int i = 0; i < o.warmup; ++i) call();
  std::vector<double> times;
  for (int rep = 0; rep < o.reps; ++rep) {
    ctl.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iters; ++i) call();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        o.iters;
    times.push_back(max_over_ranks(ctl, us));
  }
  std::sort(times.begin(), times.end());
  const double median = times.size() % 2
                            ? times[times.size() / 2]
                            : (times[times.size() / 2 - 1] + times[times.size() / 2]) / 2;
  long long wrong = -1;
  if (o.check) {
    // Fresh inputs (in place they were reduced over and over) and a poisoned output.
    fill_input(type, kind, send, count, r);
    if (in_place)
      std::memcpy(recv, send, bytes);
    else
      std::memset(recv, 0xA5, bytes);
    call();
    wrong = sum_over_ranks(ctl, static_cast<long long>(count_wrong(type, kind, recv, count, P)));
  }
  return make_measurement(median, bytes, P, wrong);
}
template <class Tr, class Algo>
measurement measure(Tr& t, const perf_options& o, const Algo& algo, scalar_type type,
                    reduce_kind kind, void* send, void* recv, std::size_t count, bool in_place) {
  return measure_on(t, t, o, algo, type, kind, send, recv, count, in_place);
}

/// One row: algorithm `aname` at `bytes` on transport `t`, out of place then in place;
/// rank 0 appends it. `native`, when given, runs `passthrough` for a transport without a
/// vendor allreduce (shm: MPI_Allreduce over the same processes).
template <class Tr, class Native>
void run_one(Tr& t, const perf_options& o, const std::string& transport_name,
             const std::string& aname, scalar_type type, reduce_kind kind, std::size_t bytes,
             void* send, void* recv, std::vector<row>& rows, Native* native) {
  with_algorithm(aname, o, [&](const auto& algo) {
    using Algo = std::decay_t<decltype(algo)>;
    const std::size_t count = bytes / size_of(type);
    row rw{aname,
           transport_name,
           std::string(name_of(type)),
           std::string(name_of(kind)),
           t.size(),
           bytes,
           count,
           {},
           {}};
    if constexpr (std::is_same_v<Algo, passthrough> && !has_native_runtime_allreduce<Tr>) {
      if constexpr (has_native_runtime_allreduce<Native>) {
        if (!native) return;
        rw.transport = "mpi";
        rw.ranks = native->size();
        rw.out_of_place = measure(*native, o, algo, type, kind, send, recv, count, false);
        rw.in_place = measure(*native, o, algo, type, kind, send, recv, count, true);
        if (t.rank() == 0) rows.push_back(rw);
      }
      return; // else removed from the list before (threads has no vendor allreduce)
    } else {
      rw.out_of_place = measure(t, o, algo, type, kind, send, recv, count, false);
      rw.in_place = measure(t, o, algo, type, kind, send, recv, count, true);
      if (t.rank() == 0) rows.push_back(rw);
    }
  });
}

/// Every op, size and algorithm of one dtype on transport `t`; rank 0 collects rows.
/// `native` as in `run_one`, interleaved with the others per size.
template <class Tr, class Native>
void run_type(Tr& t, const perf_options& o, const std::string& transport_name, scalar_type type,
              std::vector<row>& rows, Native* native) {
  const auto sz = sizes(o, size_of(type));
  const std::size_t max_bytes = std::max<std::size_t>(size_of(type), sz.empty() ? 0 : sz.back());
  auto run_ops = [&](void* send, void* recv) {
    for (const auto& oname : o.ops)
      for (std::size_t bytes : sz)
        for (const auto& aname : o.algorithms)
          run_one(t, o, transport_name, aname, type, parse_op(oname), bytes, send, recv, rows,
                  native);
  };
  // 16-byte words: aligned for every element type
  const std::size_t words = (max_bytes + 15) / 16;
  if constexpr (requires { t.template allocate<raw_element<16>>(words).span(); }) {
    if (o.registered) { // the shared-memory transport's registered buffers (collective)
      auto send = t.template allocate<raw_element<16>>(words),
           recv = t.template allocate<raw_element<16>>(words);
      run_ops(send.span().data(), recv.span().data());
      return;
    }
  }
  std::vector<raw_element<16>> send(words), recv(words);
  run_ops(send.data(), recv.data());
}

/// Runs every configured (dtype, op, size, algorithm) on transport `t`; rank 0 collects rows.
template <class Tr, class Native = Tr>
void run_all(Tr& t, const perf_options& o, const std::string& transport_name,
             std::vector<row>& rows, Native* native = nullptr) {
  for (const auto& dname : o.dtypes)
    run_type(t, o, transport_name, parse_dtype(dname), rows, native);
}

} // namespace tcoll::bench
