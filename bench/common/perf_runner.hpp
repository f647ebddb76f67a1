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

template <class T>
struct type_tag {
  using type = T;
};

/// Calls f(type_tag<T>{}) for the element type named `name`.
template <class F>
void with_dtype(const std::string& name, F&& f) {
  if (name == "float") return f(type_tag<float>{});
  if (name == "double") return f(type_tag<double>{});
  if (name == "half") return f(type_tag<half>{});
  if (name == "bfloat16") return f(type_tag<bfloat16>{});
  if (name == "int8") return f(type_tag<std::int8_t>{});
  if (name == "uint8") return f(type_tag<std::uint8_t>{});
  if (name == "int32") return f(type_tag<std::int32_t>{});
  if (name == "int64") return f(type_tag<std::int64_t>{});
  throw invalid_argument("allreduce_perf: unknown dtype " + name);
}

template <class F>
void with_op(const std::string& name, F&& f) {
  if (name == "sum") return f(sum_op{});
  if (name == "prod") return f(prod_op{});
  if (name == "min") return f(min_op{});
  if (name == "max") return f(max_op{});
  if (name == "avg") return f(avg_op{});
  throw invalid_argument("allreduce_perf: unknown op " + name);
}

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
  visit_algorithm(parse_algorithm(name), knobs, f);
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
template <class T, class Op, class Tr, class Ctl, class Algo>
measurement measure_on(Tr& t, Ctl& ctl, const perf_options& o, const Algo& algo, T* send, T* recv,
                       std::size_t count, bool in_place) {
  const int P = t.size(), r = t.rank();
  const Op op{};
  auto call = [&] {
    if (in_place)
      allreduce(t, recv, recv, count, op, algo);
    else
      allreduce(t, send, recv, count, op, algo);
  };
  fill_input<T, Op>(send, count, r);
  if (in_place) std::memcpy(static_cast<void*>(recv), send, count * sizeof(T));
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
    fill_input<T, Op>(send, count, r);
    if (in_place)
      std::memcpy(static_cast<void*>(recv), send, count * sizeof(T));
    else
      std::memset(static_cast<void*>(recv), 0xA5, count * sizeof(T));
    call();
    wrong = sum_over_ranks(ctl, static_cast<long long>(count_wrong<T, Op>(recv, count, P)));
  }
  return make_measurement(median, count * sizeof(T), P, wrong);
}
template <class T, class Op, class Tr, class Algo>
measurement measure(Tr& t, const perf_options& o, const Algo& algo, T* send, T* recv,
                    std::size_t count, bool in_place) {
  return measure_on<T, Op>(t, t, o, algo, send, recv, count, in_place);
}

/// One row: algorithm `aname` at `bytes` on transport `t`, out of place then in place;
/// rank 0 appends it. `native`, when given, runs `passthrough` for a transport without a
/// vendor allreduce (shm: MPI_Allreduce over the same processes).
template <class T, class Op, class Tr, class Native>
void run_one(Tr& t, const perf_options& o, const std::string& transport_name,
             const std::string& aname, const std::string& op_name, std::size_t bytes,
             std::span<T> send, std::span<T> recv, std::vector<row>& rows, Native* native) {
  with_algorithm(aname, o, [&](const auto& algo) {
    using Algo = std::decay_t<decltype(algo)>;
    if constexpr (std::is_same_v<Algo, passthrough> && !has_native_allreduce<Tr, T, Op>) {
      if constexpr (has_native_allreduce<Native, T, Op>) {
        if (!native) return;
        row rw{aname,
               "mpi",
               std::string(type_name<T>()),
               op_name,
               native->size(),
               bytes,
               bytes / sizeof(T),
               {},
               {}};
        rw.out_of_place =
            measure<T, Op>(*native, o, algo, send.data(), recv.data(), rw.count, false);
        rw.in_place = measure<T, Op>(*native, o, algo, send.data(), recv.data(), rw.count, true);
        if (t.rank() == 0) rows.push_back(rw);
      }
      return; // else removed from the list before (threads has no vendor allreduce)
    } else {
      row rw{aname,    transport_name, std::string(type_name<T>()), op_name,
             t.size(), bytes,          bytes / sizeof(T),           {},
             {}};
      rw.out_of_place = measure<T, Op>(t, o, algo, send.data(), recv.data(), rw.count, false);
      rw.in_place = measure<T, Op>(t, o, algo, send.data(), recv.data(), rw.count, true);
      if (t.rank() == 0) rows.push_back(rw);
    }
  });
}

/// Every size and algorithm of one (dtype, op) on transport `t`; rank 0 collects rows.
/// `native` as in `run_one`, interleaved with the others per size.
template <class T, class Op, class Tr, class Native>
void run_type_op(Tr& t, const perf_options& o, const std::string& transport_name,
                 const std::string& op_name, std::span<T> send, std::span<T> recv,
                 std::vector<row>& rows, Native* native) {
  for (std::size_t bytes : sizes(o, sizeof(T)))
    for (const auto& aname : o.algorithms)
      run_one<T, Op>(t, o, transport_name, aname, op_name, bytes, send, recv, rows, native);
}

template <class T, class Tr, class Native>
void run_type(Tr& t, const perf_options& o, const std::string& transport_name,
              std::vector<row>& rows, Native* native) {
  const auto sz = sizes(o, sizeof(T));
  const std::size_t max_count = sz.empty() ? 1 : std::max<std::size_t>(1, sz.back() / sizeof(T));
  auto run_ops = [&](std::span<T> send, std::span<T> recv) {
    for (const auto& oname : o.ops)
      with_op(oname, [&](auto op) {
        run_type_op<T, decltype(op)>(t, o, transport_name, oname, send, recv, rows, native);
      });
  };
  if constexpr (requires { t.template allocate<T>(max_count).span(); }) {
    if (o.registered) { // the shared-memory transport's registered buffers (collective)
      auto send = t.template allocate<T>(max_count), recv = t.template allocate<T>(max_count);
      run_ops(send.span(), recv.span());
      return;
    }
  }
  std::vector<T> send(max_count), recv(max_count);
  run_ops(send, recv);
}

/// Runs every configured (dtype, op, size, algorithm) on transport `t`; rank 0 collects rows.
template <class Tr, class Native = Tr>
void run_all(Tr& t, const perf_options& o, const std::string& transport_name,
             std::vector<row>& rows, Native* native = nullptr) {
  for (const auto& dname : o.dtypes)
    with_dtype(dname, [&](auto tag) {
      run_type<typename decltype(tag)::type>(t, o, transport_name, rows, native);
    });
}

} // namespace tcoll::bench
