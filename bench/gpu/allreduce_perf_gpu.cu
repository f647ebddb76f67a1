// allreduce_perf, device transports: `-t device_team` (N virtual ranks on one GPU, cuda
// reducer) and `-t nccl` (one rank per visible GPU, ncclSend/ncclRecv groups, or
// `-a passthrough` for ncclAllReduce). Output follows nccl-tests all_reduce_perf:
//   size count type redop root | time algbw busbw #wrong (out-of-place) | same (in-place)
// with busbw = algbw * 2(P-1)/P and bit-exact checking (-c 1) on integer-valued inputs.
//
// device_team adds a `bound%` column: the ring moves 5(P-1)S bytes through device memory
// (reduce-scatter: P-1 rounds of P reduces reading 2S/P and writing S/P; allgather: P-1 rounds
// of P copies of S/P), so its time cannot beat 5(P-1)S / (D2D memcpy bandwidth measured in the
// same run, bytes read + written); bound% = that time / measured time.
//
//   allreduce_perf_gpu -t device_team|nccl [-g ranks] [-a ring|recursive_doubling|
//       recursive_halving_doubling|binomial_tree|automatic|passthrough] [-b 1M] [-e 1G] [-f 2]
//       [-n 20] [-w 5] [-c 1] [-o sum|avg|max] [-d float|half|bfloat16] [-S segbytes]
//       [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <tcoll/collectives.hpp>
#include <tcoll/reduce/cuda.cuh>
#include <tcoll/transport/device_team.hpp>
#if TCOLL_BENCH_NCCL
#include <tcoll/transport/nccl.hpp>
#endif

#include "gpu_bench_util.cuh"

using namespace tcoll;

namespace {

struct options {
  std::string transport = "device_team", algorithm = "ring", op = "sum", type = "float";
  int ranks = 8;
  std::size_t min_bytes = std::size_t{1} << 20, max_bytes = std::size_t{1} << 30;
  double factor = 2;
  int iters = 20, warmup = 5;
  bool check = true;
  std::size_t segment = std::size_t{1} << 30; // zero-copy on one GPU: no need to segment
  std::string json;
};

std::size_t parse_bytes(const char* s) {
  return tcoll::bench::parse_bytes_or_exit("allreduce_perf_gpu", s);
}

void check(cudaError_t e, const char* what) {
  tcoll::bench::check_or_exit("allreduce_perf_gpu", e, what);
}

/// Input of rank r at element i: small integers, exact in every type for P <= 8 (sum <= 160).
__host__ __device__ inline int input_value(int r, std::size_t i) {
  return int((i * 7 + r) % 13) + r;
}

template <class T>
__global__ void fill_input(T* p, std::size_t n, int r) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = detail::cuda::from_acc<T>(static_cast<accumulator_t<T>>(float(input_value(r, i))));
}

/// Expected element i for P ranks, computed on the host by the closed form.
template <class T, class Op>
T expected(int P, std::size_t i) {
  double v = 0;
  if constexpr (std::is_same_v<Op, max_op>) {
    v = input_value(0, i);
    for (int r = 1; r < P; ++r) v = std::max<double>(v, input_value(r, i));
  } else {
    for (int r = 0; r < P; ++r) v += input_value(r, i);
  }
  if constexpr (std::is_same_v<Op, avg_op>)
    return T(static_cast<float>(static_cast<float>(v) / static_cast<float>(P)));
  else
    return T(static_cast<float>(v));
}

template <class F>
void with_algorithm(const options& o, F&& f) {
  automatic knobs{.rules = {}};
  knobs.ring_knobs.max_segment_bytes = o.segment;
  if (o.algorithm == "automatic") {
    automatic au{};
    au.ring_knobs = knobs.ring_knobs;
    return f(au);
  }
  visit_algorithm(parse_algorithm(o.algorithm), knobs, f);
}

struct result {
  std::size_t bytes, count;
  double time_us[2], algbw[2], busbw[2];
  std::size_t wrong[2];
  double bound_pct;
};

/// Rank body shared by both transports: every rank runs the size sweep; rank 0 prints.
/// `sync()` is a host barrier across ranks after each rank synchronised its stream.
template <class T, class Op, class Tr, class Sync>
void sweep(Tr& t, cudaStream_t s, const options& o, Sync&& sync, std::vector<result>& out) {
  const int P = t.size(), rank = t.rank();
  const std::size_t maxn = o.max_bytes / sizeof(T);
  T *in = nullptr, *res = nullptr, *scratch = nullptr;
  check(cudaMalloc(&in, maxn * sizeof(T)), "cudaMalloc");
  check(cudaMalloc(&res, maxn * sizeof(T)), "cudaMalloc");
  if (rank == 0) check(cudaMalloc(&scratch, maxn * sizeof(T)), "cudaMalloc");
  const cuda_reducer red{s};
  with_algorithm(o, [&]<class Algo>(const Algo& algo) {
    if constexpr (std::is_same_v<Algo, passthrough> && !has_native_allreduce<Tr, T, Op>) {
      if (rank == 0) std::fprintf(stderr, "passthrough needs -t nccl\n");
    } else {
      for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes;
           bytes = std::max(bytes + 1, static_cast<std::size_t>(bytes * o.factor))) {
        const std::size_t n = bytes / sizeof(T);
        result r{};
        r.bytes = n * sizeof(T);
        r.count = n;
        for (int ip = 0; ip < 2; ++ip) {
          T* dst = ip ? in : res;
          auto refill = [&] {
            fill_input<<<512, 256, 0, s>>>(in, n, rank);
            check(cudaGetLastError(), "fill");
          };
          refill();
          for (int w = 0; w < o.warmup; ++w) {
            allreduce(t, static_cast<const T*>(in), dst, n, Op{}, algo, red);
            if (ip) refill();
          }
          check(cudaStreamSynchronize(s), "warmup");
          if (ip) refill();
          check(cudaStreamSynchronize(s), "refill");
          sync();
          const auto t0 = std::chrono::steady_clock::now();
          for (int it = 0; it < o.iters; ++it)
            allreduce(t, static_cast<const T*>(in), dst, n, Op{}, algo, red);
          check(cudaStreamSynchronize(s), "timed");
          sync();
          const double sec =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
              o.iters;
          // correctness: one fresh call, checked bitwise against the closed form
          std::size_t wrong = 0;
          if (o.check) {
            refill();
            allreduce(t, static_cast<const T*>(in), dst, n, Op{}, algo, red);
            std::vector<T> h(n);
            // stream ordered: the allreduce may still run; copy on its stream, then wait
            check(cudaMemcpyAsync(h.data(), dst, n * sizeof(T), cudaMemcpyDefault, s), "download");
            check(cudaStreamSynchronize(s), "download");
            for (std::size_t i = 0; i < n; ++i) {
              const T want = expected<T, Op>(P, i);
              wrong += std::memcmp(&h[i], &want, sizeof(T)) != 0;
            }
          }
          r.time_us[ip] = sec * 1e6;
          r.algbw[ip] = double(r.bytes) / sec / 1e9;
          r.busbw[ip] = r.algbw[ip] * (P > 1 ? 2.0 * (P - 1) / P : 1.0);
          r.wrong[ip] = wrong;
          sync();
        }
        if (rank == 0) {
          // memcpy D2D bandwidth at this size, same run (bytes read + written)
          cudaEvent_t a, b;
          cudaEventCreate(&a);
          cudaEventCreate(&b);
          cudaMemcpyAsync(scratch, res, r.bytes, cudaMemcpyDeviceToDevice, s);
          cudaEventRecord(a, s);
          for (int it = 0; it < o.iters; ++it)
            cudaMemcpyAsync(scratch, res, r.bytes, cudaMemcpyDeviceToDevice, s);
          cudaEventRecord(b, s);
          cudaEventSynchronize(b);
          float ms = 0;
          cudaEventElapsedTime(&ms, a, b);
          cudaEventDestroy(a);
          cudaEventDestroy(b);
          const double copy_bps = 2.0 * r.bytes / (ms / 1e3 / o.iters);
          const double bound_s = 5.0 * (P - 1) * r.bytes / copy_bps;
          r.bound_pct = Tr::name == std::string_view("device_team") && P > 1
                            ? 100.0 * bound_s / (r.time_us[0] / 1e6)
                            : 0.0;
          std::printf("%12zu %12zu %8s %6s %5s | %9.1f %7.2f %7.2f %6zu | %9.1f %7.2f %7.2f %6zu |"
                      " %6.1f\n",
                      r.bytes, r.count, std::string(type_name<T>()).c_str(), o.op.c_str(), "-1",
                      r.time_us[0], r.algbw[0], r.busbw[0], r.wrong[0], r.time_us[1], r.algbw[1],
                      r.busbw[1], r.wrong[1], r.bound_pct);
          std::fflush(stdout);
          out.push_back(r);
        }
        sync();
      }
    }
  });
  cudaFree(in);
  cudaFree(res);
  if (scratch) cudaFree(scratch);
}

void header(const options& o, int P, const char* gpu) {
  std::printf("# allreduce_perf_gpu -t %s -a %s, %d ranks, GPU %s\n", o.transport.c_str(),
              o.algorithm.c_str(), P, gpu);
  std::printf("# %10s %12s %8s %6s %5s | %9s %7s %7s %6s | %9s %7s %7s %6s | %6s\n", "size",
              "count", "type", "redop", "root", "time(us)", "algbw", "busbw", "#wrong", "time(us)",
              "algbw", "busbw", "#wrong", "bound%");
  std::printf("# %51s out-of-place %30s in-place\n", "", "");
}

template <class T, class Op>
int run(const options& o, const cudaDeviceProp& prop) {
  std::vector<result> rows;
  int P = o.ranks;
  if (o.transport == "device_team") {
    header(o, P, prop.name);
    device_team(P, std::chrono::seconds(120)).run([&](device_transport& t) {
      sweep<T, Op>(
          t, t.stream(), o, [&] { t.barrier(); }, rows);
    });
  } else if (o.transport == "nccl") {
#if TCOLL_BENCH_NCCL
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    P = count;
    header(o, P, prop.name);
    std::vector<ncclComm_t> comms(P);
    std::vector<int> devs(P);
    for (int d = 0; d < P; ++d) devs[d] = d;
    if (ncclCommInitAll(comms.data(), P, devs.data()) != ncclSuccess) {
      std::fprintf(stderr, "ncclCommInitAll failed\n");
      return 1;
    }
    std::barrier<> bar(P);
    std::vector<std::jthread> threads;
    for (int d = 0; d < P; ++d)
      threads.emplace_back([&, d] {
        check(cudaSetDevice(d), "cudaSetDevice");
        cudaStream_t s;
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
        {
          nccl_transport t(comms[d], s);
          sweep<T, Op>(
              t, s, o, [&] { bar.arrive_and_wait(); }, rows);
        }
        cudaStreamDestroy(s);
      });
    threads.clear();
    for (auto c : comms) ncclCommDestroy(c);
#else
    std::fprintf(stderr, "allreduce_perf_gpu was built without NCCL\n");
    return 2;
#endif
  } else {
    std::fprintf(stderr, "unknown transport %s (device_team, nccl)\n", o.transport.c_str());
    return 2;
  }
  std::size_t wrong = 0;
  for (const auto& r : rows) wrong += r.wrong[0] + r.wrong[1];
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << "{\"benchmark\": \"allreduce_perf\", \"transport\": \"" << o.transport
      << "\", \"algorithm\": \"" << o.algorithm << "\", \"ranks\": " << P << ", \"gpu\": \""
      << prop.name << "\", \"type\": \"" << type_name<T>() << "\", \"op\": \"" << o.op
      << "\", \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      f << (i ? ",\n" : "\n") << "{\"bytes\": " << r.bytes << ", \"count\": " << r.count
        << ", \"oop_time_us\": " << r.time_us[0] << ", \"oop_algbw\": " << r.algbw[0]
        << ", \"oop_busbw\": " << r.busbw[0] << ", \"oop_wrong\": " << r.wrong[0]
        << ", \"ip_time_us\": " << r.time_us[1] << ", \"ip_algbw\": " << r.algbw[1]
        << ", \"ip_busbw\": " << r.busbw[1] << ", \"ip_wrong\": " << r.wrong[1]
        << ", \"bound_pct\": " << r.bound_pct << "}";
    }
    f << "\n]}\n";
  }
  std::printf("# Out of bounds values : %zu %s\n", wrong, wrong ? "ERROR" : "OK");
  return wrong ? 1 : 0;
}

template <class T>
int run_op(const options& o, const cudaDeviceProp& prop) {
  if (o.op == "sum") return run<T, sum_op>(o, prop);
  if (o.op == "avg") return run<T, avg_op>(o, prop);
  if (o.op == "max") return run<T, max_op>(o, prop);
  std::fprintf(stderr, "unknown op %s (sum, avg, max)\n", o.op.c_str());
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "allreduce_perf_gpu: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-t")
      o.transport = next();
    else if (a == "-g")
      o.ranks = std::atoi(next());
    else if (a == "-a")
      o.algorithm = next();
    else if (a == "-b")
      o.min_bytes = parse_bytes(next());
    else if (a == "-e")
      o.max_bytes = parse_bytes(next());
    else if (a == "-f")
      o.factor = std::atof(next());
    else if (a == "-n")
      o.iters = std::atoi(next());
    else if (a == "-w")
      o.warmup = std::atoi(next());
    else if (a == "-c")
      o.check = std::atoi(next()) != 0;
    else if (a == "-o")
      o.op = next();
    else if (a == "-d")
      o.type = next();
    else if (a == "-S")
      o.segment = parse_bytes(next());
    else if (a == "--json")
      o.json = next();
    else {
      std::fprintf(stderr,
                   "usage: see the comment at the top of bench/gpu/allreduce_perf_gpu.cu\n");
      return 2;
    }
  }
  if (o.iters < 1 || o.factor <= 1 || o.min_bytes == 0 || o.min_bytes > o.max_bytes ||
      o.ranks < 1 || o.ranks > 64 || o.segment == 0) {
    std::fprintf(stderr, "allreduce_perf_gpu: need -n >= 1, -f > 1, 0 < -b <= -e, 1 <= -g <= 64\n");
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  try {
    if (o.type == "float") return run_op<float>(o, prop);
    if (o.type == "half") return run_op<tcoll::half>(o, prop);
    if (o.type == "bfloat16") return run_op<bfloat16>(o, prop);
    std::fprintf(stderr, "unknown type %s (float, half, bfloat16)\n", o.type.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_perf_gpu: %s\n", e.what());
    return 1;
  }
}
