// reduce_perf: bandwidth of the device reducers side by side with cudaMemcpyAsync
// device-to-device in the same run. Bytes counted are bytes read plus written: a copy of S
// bytes moves 2S, an out-of-place reduce dst = a + b of S-byte buffers moves 3S, the fused
// 4-source reduce moves 5S. Each figure is the median over -n timed iterations (after -w
// warm-up ones), each timed with CUDA events on one stream. The cuda and thrust results are
// compared bitwise (#wrong). The mixed-precision casts (`cuda_reducer::convert`) are timed
// both ways between float and the row's type: `to T` reads 4 bytes and writes sizeof(T) per
// element, `to float` the reverse; their %copy compares with the memcpy of the same run.
//
//   reduce_perf [-b 1M] [-e 1G] [-f 2] [-n 20] [-w 5] [-d float,half,bfloat16] [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <tcoll/reduce/cuda.cuh>
#include <tcoll/reduce/thrust.cuh>

#include "gpu_bench_util.cuh"

using namespace tcoll;

namespace {

struct options {
  std::size_t min_bytes = std::size_t{1} << 20, max_bytes = std::size_t{1} << 30;
  double factor = 2;
  int iters = 20, warmup = 5;
  std::vector<std::string> types = {"float", "half", "bfloat16"};
  std::string json;
};

std::size_t parse_bytes(const char* s) {
  return tcoll::bench::parse_bytes_or_exit("reduce_perf", s);
}

void check(cudaError_t e, const char* what) {
  tcoll::bench::check_or_exit("reduce_perf", e, what);
}

/// Median time in ms of `iters` runs of f() on stream s.
template <class F>
double median_ms(cudaStream_t s, int warmup, int iters, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) check(cudaEventCreate(&e), "cudaEventCreate");
  for (int i = 0; i < iters; ++i) {
    check(cudaEventRecord(ev[2 * i], s), "cudaEventRecord");
    f();
    check(cudaEventRecord(ev[2 * i + 1], s), "cudaEventRecord");
  }
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  std::vector<double> t(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime");
    t[i] = ms;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
  return t[iters / 2];
}

template <class T>
__global__ void fill(T* p, std::size_t n, int salt) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = detail::cuda::from_acc<T>(static_cast<accumulator_t<T>>(float((i * 7 + salt) % 13)));
}

struct row {
  std::string type;
  std::size_t bytes;
  double copy, cuda, thrust, fused4, to_t, to_float;
  std::size_t wrong;
};

template <class T>
void run_type(const options& o, cudaStream_t s, std::vector<row>& rows) {
  const std::size_t maxn = o.max_bytes / sizeof(T);
  T *a, *b, *c, *d, *e, *x;
  for (T** p : {&a, &b, &c, &d, &e, &x}) check(cudaMalloc(p, maxn * sizeof(T)), "cudaMalloc");
  float *fa, *fb; // float sides of the casts
  for (float** p : {&fa, &fb}) check(cudaMalloc(p, maxn * sizeof(float)), "cudaMalloc");
  fill<<<1024, 256, 0, s>>>(fa, maxn, 7);
  int i = 0;
  for (T* p : {a, b, c, d, e, x}) fill<<<1024, 256, 0, s>>>(p, maxn, i++);
  check(cudaStreamSynchronize(s), "fill");
  const cuda_reducer cr{s};
  const thrust_reducer tr{s};
  for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes;
       bytes = std::max(bytes + 1, static_cast<std::size_t>(bytes * o.factor))) {
    const std::size_t n = bytes / sizeof(T);
    const double gb = double(n * sizeof(T)) / 1e9; // one buffer, GB
    const double copy_ms = median_ms(s, o.warmup, o.iters, [&] {
      check(cudaMemcpyAsync(x, a, n * sizeof(T), cudaMemcpyDeviceToDevice, s), "copy");
    });
    const double cuda_ms =
        median_ms(s, o.warmup, o.iters, [&] { cr.reduce(sum_op{}, c, a, b, n); });
    const double thrust_ms =
        median_ms(s, o.warmup, o.iters, [&] { tr.reduce(sum_op{}, d, a, b, n); });
    const T* src4[] = {a, b, e, x};
    const double fused_ms = median_ms(s, o.warmup, o.iters, [&] {
      cr.reduce_many(sum_op{}, c, std::span<const T* const>(src4), n);
    });
    const double to_t_ms = median_ms(s, o.warmup, o.iters, [&] { cr.convert(c, fa, n, 0.5f); });
    const double to_float_ms = median_ms(s, o.warmup, o.iters, [&] { cr.convert(fb, a, n, 2.0f); });
    const double cast_gb = double(n) * (sizeof(float) + sizeof(T)) / 1e9;
    // recompute the pairwise results once more and compare cuda with thrust bitwise
    cr.reduce(sum_op{}, c, a, b, n);
    tr.reduce(sum_op{}, d, a, b, n);
    std::vector<T> hc(n), hd(n);
    check(cudaMemcpyAsync(hc.data(), c, n * sizeof(T), cudaMemcpyDefault, s), "download");
    check(cudaMemcpyAsync(hd.data(), d, n * sizeof(T), cudaMemcpyDefault, s), "download");
    check(cudaStreamSynchronize(s), "download");
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < n; ++k) wrong += std::memcmp(&hc[k], &hd[k], sizeof(T)) != 0;
    row r{std::string(type_name<T>()),
          n * sizeof(T),
          2 * gb / (copy_ms / 1e3),
          3 * gb / (cuda_ms / 1e3),
          3 * gb / (thrust_ms / 1e3),
          5 * gb / (fused_ms / 1e3),
          cast_gb / (to_t_ms / 1e3),
          cast_gb / (to_float_ms / 1e3),
          wrong};
    std::printf("%12zu %10s | %8.1f | %8.1f %6.1f%% | %8.1f %6.1f%% | %8.1f %6.1f%% | %8.1f "
                "%6.1f%% | %8.1f %6.1f%% | %6zu\n",
                r.bytes, r.type.c_str(), r.copy, r.cuda, 100 * r.cuda / r.copy, r.thrust,
                100 * r.thrust / r.copy, r.fused4, 100 * r.fused4 / r.copy, r.to_t,
                100 * r.to_t / r.copy, r.to_float, 100 * r.to_float / r.copy, r.wrong);
    std::fflush(stdout);
    rows.push_back(r);
  }
  for (T* p : {a, b, c, d, e, x}) cudaFree(p);
  cudaFree(fa);
  cudaFree(fb);
}

} // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "reduce_perf: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-b")
      o.min_bytes = parse_bytes(next());
    else if (a == "-e")
      o.max_bytes = parse_bytes(next());
    else if (a == "-f")
      o.factor = std::atof(next());
    else if (a == "-n")
      o.iters = std::atoi(next());
    else if (a == "-w")
      o.warmup = std::atoi(next());
    else if (a == "-d") {
      o.types.clear();
      std::string s = next();
      for (std::size_t p = 0; p <= s.size();) {
        const std::size_t q = std::min(s.find(',', p), s.size());
        if (q > p) o.types.push_back(s.substr(p, q - p));
        p = q + 1;
      }
    } else if (a == "--json")
      o.json = next();
    else {
      std::fprintf(stderr,
                   "usage: reduce_perf [-b min] [-e max] [-f factor] [-n iters] [-w warmup] "
                   "[-d float,half,bfloat16] [--json file]\n");
      return 2;
    }
  }
  if (o.iters < 1 || o.factor <= 1 || o.min_bytes == 0 || o.min_bytes > o.max_bytes) {
    std::fprintf(stderr, "reduce_perf: need -n >= 1, -f > 1, 0 < -b <= -e\n");
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("# reduce_perf on %s (%d SMs); GB/s = (bytes read + written) / median time\n",
              prop.name, prop.multiProcessorCount);
  std::printf("# %10s %10s | %8s | %8s %7s | %8s %7s | %8s %7s | %8s %7s | %8s %7s | %6s\n",
              "bytes", "type", "memcpy", "cuda", "%copy", "thrust", "%copy", "fused4", "%copy",
              "to_T", "%copy", "to_float", "%copy", "#wrong");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<row> rows;
  for (const auto& t : o.types) {
    if (t == "float")
      run_type<float>(o, s, rows);
    else if (t == "half")
      run_type<tcoll::half>(o, s, rows);
    else if (t == "bfloat16")
      run_type<bfloat16>(o, s, rows);
    else {
      std::fprintf(stderr, "reduce_perf: unknown type %s (float, half, bfloat16)\n", t.c_str());
      return 2;
    }
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << "{\"benchmark\": \"reduce_perf\", \"gpu\": \"" << prop.name << "\", \"rows\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      f << (i ? ",\n" : "\n") << "{\"type\": \"" << r.type << "\", \"bytes\": " << r.bytes
        << ", \"memcpy_gbs\": " << r.copy << ", \"cuda_gbs\": " << r.cuda
        << ", \"thrust_gbs\": " << r.thrust << ", \"fused4_gbs\": " << r.fused4
        << ", \"convert_to_type_gbs\": " << r.to_t << ", \"convert_to_float_gbs\": " << r.to_float
        << ", \"wrong\": " << r.wrong << "}";
    }
    f << "\n]}\n";
  }
  std::size_t wrong = 0;
  for (const auto& r : rows) wrong += r.wrong;
  cudaStreamDestroy(s);
  return wrong ? 1 : 0;
}
