// The memory check of the sparse-chunk adaptor (suite 'sparse', host only): where a pointer
// lives according to the CUDA driver (include/tcoll/detail/memory_kind.hpp), and the clear
// errors of csc_allreduce and gradient_pool instead of a crash when a host policy is given
// device memory. Without a GPU a stand-in driver (fake_libcuda.cpp, soname libcuda.so.1,
// its path in the generated fake_libcuda_location.h, or TCOLL_FAKE_LIBCUDA in the environment)
// is loaded halfway through: before it every pointer must be
// host memory (no driver in the process), after it the addresses it declares device memory
// must be rejected, naming the argument and the rank, and no other call may ask the driver.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <tcoll/detail/memory_kind.hpp>
#include <tcoll/sparse.hpp>
#include <tcoll/transport/threads.hpp>

#include "fake_libcuda_location.h" // TCOLL_FAKE_LIBCUDA: where meson built the stand-in driver

using namespace std::chrono_literals;
namespace sp = tcoll::sparse;
using tcoll::detail::memory_kind;
using tcoll::detail::pointer_memory_kind;
using tcoll::detail::require_memory;

namespace {

/// Storage the pool's allocator hands out: a view into memory the test owns.
struct borrowed {
  float* p;
  float* data() const noexcept { return p; }
};

/// The stand-in driver, loaded by path.
struct fake_driver {
  void (*set)(const void*, std::size_t, const void*, std::size_t) = nullptr;
  int (*queries)() = nullptr;
};
fake_driver load_fake_driver() {
  const char* path = std::getenv("TCOLL_FAKE_LIBCUDA");
  if (!path) path = TCOLL_FAKE_LIBCUDA;
  void* lib = ::dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  REQUIRE_MESSAGE(lib != nullptr, "cannot load " << path << ": " << ::dlerror());
  fake_driver d;
  d.set = reinterpret_cast<decltype(d.set)>(::dlsym(lib, "tcoll_fake_cuda_set"));
  d.queries = reinterpret_cast<decltype(d.queries)>(::dlsym(lib, "tcoll_fake_cuda_queries"));
  REQUIRE(bool(d.set));
  REQUIRE(bool(d.queries));
  // the check must now find it under its soname, as it finds the real driver
  REQUIRE(::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr);
  return d;
}

/// A read-only view of `n` floats at `p`.
std::span<const float> d_span(const float* p, std::size_t n) {
  return {p, n};
}

/// One csc iteration on the adaptor's pool.
template <class Adaptor>
void one_iteration(Adaptor& a) {
  auto& pool = a.pool();
  for (std::size_t i = 0; i < pool.size(); ++i) pool.data()[i] = 0.25f * float(i % 7);
  a.mark_all_ready();
  a.finish();
}

} // namespace

// Doctest runs the cases in file order; the first must run before the driver is loaded.
TEST_CASE("without a CUDA driver in the process every pointer is host memory") {
  if (::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != nullptr)
    MESSAGE("a CUDA driver is already loaded in this process; only checking that host memory "
            "reads as host memory");
  std::vector<float> heap(100);
  std::unique_ptr<double[]> raw(new double[7]);
  void* c = std::malloc(64);
  int stack = 0;
  CHECK(pointer_memory_kind(heap.data()) == memory_kind::host);
  CHECK(pointer_memory_kind(raw.get()) == memory_kind::host);
  CHECK(pointer_memory_kind(c) == memory_kind::host);
  CHECK(pointer_memory_kind(&stack) == memory_kind::host);
  CHECK(pointer_memory_kind(nullptr) == memory_kind::host);
  CHECK_NOTHROW(require_memory(c, true, "test", "malloc'd memory", 0));
  // a device policy given pageable host memory is refused even without a driver
  CHECK_THROWS_WITH_AS(
      require_memory(c, false, "csc_allreduce", "the gradient pool", 2),
      doctest::Contains("[rank 2]: csc_allreduce: the gradient pool is host memory"),
      tcoll::invalid_argument);
  std::free(c);
  // the adaptor over a host pool constructs and runs (a driver miss is not cached)
  tcoll::thread_team(2, 20s).run([](auto& t) {
    tcoll::gradient_pool<float> pool(std::vector<std::size_t>{100, 50});
    sp::csc_options o;
    o.chunk_elements = 32;
    sp::csc_allreduce<std::remove_reference_t<decltype(t)>, float> a(pool, t, o);
    one_iteration(a);
    CHECK(a.iterations() == 1);
  });
}

TEST_CASE("require_memory: which memory each side accepts; the error names argument and rank") {
  for (auto k : {memory_kind::host, memory_kind::host_registered, memory_kind::managed}) {
    CAPTURE(tcoll::detail::to_string(k));
    CHECK_NOTHROW(require_memory(k, true, "w", "x", 0));
  }
  for (auto k : {memory_kind::host_registered, memory_kind::managed, memory_kind::device}) {
    CAPTURE(tcoll::detail::to_string(k));
    CHECK_NOTHROW(require_memory(k, false, "w", "x", 0));
  }
  CHECK_THROWS_WITH_AS(require_memory(memory_kind::device, true, "csc_allreduce",
                                      "the gradient pool (pool.data())", 3),
                       doctest::Contains("tcoll [rank 3]: csc_allreduce: the gradient pool "
                                         "(pool.data()) is CUDA device memory"),
                       tcoll::invalid_argument);
}

TEST_CASE("with a CUDA driver: device memory given to host code throws, naming it and the rank") {
  const fake_driver drv = load_fake_driver();
  // "device" and "managed" memory: host memory the stand-in driver reports as such
  std::vector<float> dev(4096), man(4096);
  drv.set(dev.data(), dev.size() * sizeof(float), man.data(), man.size() * sizeof(float));
  std::vector<float> plain(16);
  CHECK(pointer_memory_kind(dev.data()) == memory_kind::device);
  CHECK(pointer_memory_kind(dev.data() + 4095) == memory_kind::device);
  CHECK(pointer_memory_kind(man.data() + 10) == memory_kind::managed);
  CHECK(pointer_memory_kind(plain.data()) == memory_kind::host);
  CHECK(drv.queries() > 0);

  const std::vector<std::size_t> sizes{300, 200};
  constexpr int P = 3;
  // a host reducer's pool in device memory is refused before it is written
  CHECK_THROWS_WITH_AS(
      (tcoll::gradient_pool<float>(sizes, {}, tcoll::cpu_reducer{},
                                   [&](std::size_t) { return borrowed{dev.data()}; })),
      doctest::Contains("gradient_pool: the allocator's storage is CUDA device memory"),
      tcoll::invalid_argument);

  // pools made while the ranges are empty, then declared device memory: the adaptor with
  // host_chunk_ops refuses them on every rank, naming the pool and the rank
  drv.set(nullptr, 0, nullptr, 0);
  std::vector<std::unique_ptr<tcoll::gradient_pool<float>>> pools;
  for (int r = 0; r < P; ++r)
    pools.push_back(std::make_unique<tcoll::gradient_pool<float>>(
        sizes, tcoll::gradient_pool_options{}, tcoll::cpu_reducer{},
        [&, r](std::size_t n) { return borrowed{dev.data() + std::size_t(r) * n}; }));
  drv.set(dev.data(), dev.size() * sizeof(float), man.data(), man.size() * sizeof(float));
  std::atomic<int> refused{0};
  tcoll::thread_team(P, 20s).run([&](auto& t) {
    using Tr = std::remove_reference_t<decltype(t)>;
    sp::csc_options o;
    o.chunk_elements = 64;
    const std::string want = "tcoll [rank " + std::to_string(t.rank()) +
                             "]: csc_allreduce: the gradient pool (pool.data()) is CUDA device "
                             "memory, but it is used by host code";
    try {
      sp::csc_allreduce<Tr, float> a(*pools[std::size_t(t.rank())], t, o);
      FAIL("rank " << t.rank() << ": a pool in device memory was accepted");
    } catch (const tcoll::invalid_argument& e) {
      CHECK_MESSAGE(std::string(e.what()).find(want) != std::string::npos, e.what());
      CHECK(e.rank() == t.rank());
      ++refused;
    }
  });
  CHECK(refused.load() == P);

  // managed memory and host memory the driver does not know are accepted; the driver is asked
  // only at construction, never by mark_ready or finish
  std::vector<float> host_store(3 * 600);
  for (int where = 0; where < 2; ++where) {
    CAPTURE(where);
    float* base = where == 0 ? man.data() : host_store.data();
    std::vector<std::unique_ptr<tcoll::gradient_pool<float>>> ok;
    for (int r = 0; r < P; ++r)
      ok.push_back(std::make_unique<tcoll::gradient_pool<float>>(
          sizes, tcoll::gradient_pool_options{}, tcoll::cpu_reducer{},
          [&, r](std::size_t n) { return borrowed{base + std::size_t(r) * n}; }));
    tcoll::thread_team(P, 20s).run([&](auto& t) {
      using Tr = std::remove_reference_t<decltype(t)>;
      sp::csc_options o;
      o.chunk_elements = 64;
      o.density = 0.5;
      o.warmup_iterations = 0;
      sp::csc_allreduce<Tr, float> a(*ok[std::size_t(t.rank())], t, o);
      // every rank asked before the constructors' collective pool check could complete
      const int before = drv.queries();
      for (int it = 0; it < 3; ++it) one_iteration(a);
      CHECK(a.iterations() == 3);
      CHECK(drv.queries() == before);
    });
  }
}

// Runs after the case above (file order): the stand-in driver is loaded.
TEST_CASE("top-k and the momentum step refuse device memory, naming the argument and the rank") {
  const fake_driver drv = load_fake_driver();
  std::vector<float> dev(1024), man(1024);
  drv.set(dev.data(), dev.size() * sizeof(float), man.data(), man.size() * sizeof(float));
  constexpr int P = 2;
  constexpr std::size_t n = 256;
  std::atomic<int> refused{0};
  tcoll::thread_team(P, 20s).run([&](auto& t) {
    const int r = t.rank();
    std::vector<float> in(n, 1.5f), out(n), res(n);
    float* d = dev.data() + std::size_t(r) * n;
    const auto expect = [&](auto&& call, const std::string& what) {
      try {
        call();
        FAIL("rank " << r << ": device memory as " << what << " was accepted");
      } catch (const tcoll::invalid_argument& e) {
        CHECK_MESSAGE(std::string(e.what()).find(what + " is CUDA device memory") !=
                          std::string::npos,
                      e.what());
        CHECK(e.rank() == r);
        ++refused;
      }
    };
    expect([&] { sp::topk_allreduce(t, d, out.data(), n, 8); }, "topk_allreduce: input");
    expect([&] { sp::topk_allreduce(t, in.data(), d, n, 8); }, "topk_allreduce: output");
    expect([&] { sp::topk_allreduce(t, in.data(), out.data(), n, 8, d); },
           "topk_allreduce: residual");
    // managed memory is host-accessible: accepted, and the sum is right
    float* m = man.data() + std::size_t(r) * n;
    std::fill(m, m + n, 0.5f);
    sp::topk_allreduce(t, m, out.data(), n, n);
    CHECK(out[0] == 1.0f);

    const sp::chunk_layout chunks{n, 64};
    const std::vector<unsigned char> important(chunks.count(), 1);
    std::vector<float> w(n, 1.0f), h(n, 0.0f), g(n, 0.5f);
    const sp::csc_sgd_options sgd{};
    expect([&] { sp::csc_momentum_step<float>(d_span(d, n), w, h, chunks, important, sgd, {}, r); },
           "csc_momentum_step: grad");
    expect(
        [&] {
          sp::csc_momentum_step<float>(g, std::span<float>(d, n), h, chunks, important, sgd, {}, r);
        },
        "csc_momentum_step: weights");
    expect(
        [&] {
          sp::csc_momentum_step<float>(g, w, std::span<float>(d, n), chunks, important, sgd, {}, r);
        },
        "csc_momentum_step: history");
    sp::csc_momentum_step<float>(g, w, h, chunks, important, sgd, {}, r); // host: accepted
    CHECK(w[0] == 1.0f - 0.01f * 0.5f);
  });
  CHECK(refused.load() == 6 * P);
  drv.set(nullptr, 0, nullptr, 0);
}
