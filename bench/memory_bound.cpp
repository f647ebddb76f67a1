// memory_bound: the machine's memory bandwidth as an allreduce on one node can use it, for
// the "busbw as a percentage of the memory bound" goals of docs/benchmarks.md. STREAM-like
// kernels on float arrays, run by N threads at once (each on its own slice, first touched
// by that thread), counting every byte read and written:
//   copy  b[i] = a[i]          2 x 4 bytes per element
//   add   c[i] = a[i] + b[i]   3 x 4 bytes per element (STREAM's add)
//   acc   a[i] = a[i] + b[i]   3 x 4 bytes per element (what a receive-and-reduce does)
// The aggregate rate is all threads' bytes over the slowest thread's time; the median of -R
// repetitions is reported.
//
//   memory_bound -g 2 -b 128M -R 7 [--json FILE]
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <tcoll/algorithm/select.hpp>

namespace {

struct options {
  int threads = 2;
  std::size_t bytes = std::size_t{128} << 20; ///< per array, over all threads
  int reps = 7;
  std::string json;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr,
               "memory_bound: %s\nusage: memory_bound [-g threads] [-b bytes per array (K/M/G)] "
               "[-R reps] [--json FILE]\n",
               what.c_str());
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) usage_error(std::string(flag) + " needs a value");
    const std::string v = argv[++i];
    try {
      if (flag == "-g")
        o.threads = std::stoi(v);
      else if (flag == "-b")
        o.bytes = tcoll::parse_bytes(v);
      else if (flag == "-R")
        o.reps = std::stoi(v);
      else if (flag == "--json")
        o.json = v;
      else
        usage_error("unknown flag " + std::string(flag));
    } catch (const std::exception& e) {
      usage_error(std::string(flag) + " '" + v + "': " + e.what());
    }
  }
  if (o.threads < 1 || o.threads > 1024) usage_error("-g must be in [1, 1024]");
  if (o.reps < 1) usage_error("-R must be positive");
  if (o.bytes < 4096u * static_cast<unsigned>(o.threads)) usage_error("-b is too small");
  return o;
}

struct aligned_free {
  void operator()(float* p) const { ::operator delete (p, std::align_val_t{64}); }
};
using array = std::unique_ptr<float, aligned_free>;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

} // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  const auto T = static_cast<std::size_t>(o.threads);
  const std::size_t n = o.bytes / sizeof(float) / T; // elements per thread and array
  const char* kernels[] = {"copy", "add", "acc"};
  const double bytes_per_element[] = {8, 12, 12};
  // seconds[kernel][rep][thread]
  std::vector<std::vector<std::vector<double>>> seconds(
      3,
      std::vector<std::vector<double>>(static_cast<std::size_t>(o.reps), std::vector<double>(T)));
  std::barrier sync(static_cast<std::ptrdiff_t>(T));
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < T; ++t)
    pool.emplace_back([&, t] {
      auto make = [&] {
        return array(static_cast<float*>(::operator new (n * sizeof(float), std::align_val_t{64})));
      };
      array a = make(), b = make(), c = make();
      for (std::size_t i = 0; i < n; ++i) // first touch by the thread that uses them
        a.get()[i] = 1.0f + static_cast<float>(i % 7), b.get()[i] = 0.5f, c.get()[i] = 0.0f;
      float* __restrict pa = a.get();
      float* __restrict pb = b.get();
      float* __restrict pc = c.get();
      for (int rep = 0; rep < o.reps; ++rep)
        for (int k = 0; k < 3; ++k) {
          sync.arrive_and_wait();
          const auto start = std::chrono::steady_clock::now();
          if (k == 0)
            std::memcpy(pb, pa, n * sizeof(float));
          else if (k == 1)
            for (std::size_t i = 0; i < n; ++i) pc[i] = pa[i] + pb[i];
          else
            for (std::size_t i = 0; i < n; ++i) pa[i] = pa[i] + pb[i];
          seconds[static_cast<std::size_t>(k)][static_cast<std::size_t>(rep)][t] =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
      // keep the results observable so the kernels are not optimised away
      volatile float sink = pa[n / 2] + pc[n / 3];
      (void)sink;
    });
  for (auto& th : pool) th.join();

  std::printf("# memory_bound: %d threads, %zu bytes per array (%zu per thread), median of %d\n",
              o.threads, n * sizeof(float) * T, n * sizeof(float), o.reps);
  std::printf("# %6s %12s   (bytes read + written, all threads, over the slowest thread)\n",
              "kernel", "GB/s");
  double rate[3];
  for (int k = 0; k < 3; ++k) {
    std::vector<double> per_rep;
    for (const auto& rep : seconds[static_cast<std::size_t>(k)])
      per_rep.push_back(bytes_per_element[k] * static_cast<double>(n * T) /
                        *std::max_element(rep.begin(), rep.end()) / 1e9);
    rate[k] = median(per_rep);
    std::printf("  %6s %12.2f\n", kernels[k], rate[k]);
  }
  if (!o.json.empty()) {
    std::FILE* f = std::fopen(o.json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "memory_bound: cannot write --json file '%s'\n", o.json.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"threads\": %d, \"bytes_per_array\": %zu, \"reps\": %d, \"copy_GBps\": %.4f, "
                 "\"add_GBps\": %.4f, \"acc_GBps\": %.4f}\n",
                 o.threads, n * sizeof(float) * T, o.reps, rate[0], rate[1], rate[2]);
    std::fclose(f);
  }
  return 0;
}
