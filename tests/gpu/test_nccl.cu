// The nccl transport: the foundation's allreduce bodies through ncclSend/ncclRecv groups with
// the cuda reducer, passthrough (ncclAllReduce, including ncclAvg), and the data-movement
// collectives of the table on device memory, on one communicator per visible GPU (one rank
// on a single-GPU machine: NCCL refuses two ranks on one GPU). Bodies run on rank threads,
// one GPU each.
#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include <tcoll/reduce/cuda.cuh>
#include <tcoll/transport/nccl.hpp>

#include "../common/collective_cases.hpp"
#include "device_buffers.hpp"

using namespace tcoll;
using namespace tcoll::testing;

namespace {

/// Runs f(transport, buffers) on every GPU (at most 8) with a communicator from ncclCommInitAll.
template <class F>
void on_nccl(F&& f) {
  int count = 0;
  detail::cuda::check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  const int P = std::min(count, 8);
  std::vector<ncclComm_t> comms(P);
  std::vector<int> devs(P);
  for (int d = 0; d < P; ++d) devs[d] = d;
  REQUIRE(ncclCommInitAll(comms.data(), P, devs.data()) == ncclSuccess);
  std::vector<std::jthread> threads;
  for (int d = 0; d < P; ++d)
    threads.emplace_back([&, d] {
      detail::cuda::check(cudaSetDevice(d), "cudaSetDevice");
      cudaStream_t s = nullptr;
      detail::cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
      {
        nccl_transport t(comms[d], s, {.timeout = gpu_timeout, .abort_communicator = false});
        device_buffers<cuda_reducer> b{s, d};
        f(t, b);
      }
      (void)cudaStreamDestroy(s);
    });
  threads.clear();
  for (auto c : comms) (void)ncclCommDestroy(c);
}

} // namespace

TEST_CASE("nccl transport: every algorithm over ncclSend/ncclRecv groups, cuda reducer") {
  on_nccl([](nccl_transport& t, device_buffers<cuda_reducer>& b) {
    MESSAGE("nccl ranks: " << t.size());
    matrix_options opt;
    opt.types = {"float", "half", "bfloat16", "int32", "uint8"};
    opt.ops = {"sum", "avg", "max", "prod"};
    opt.counts = {0, 1, 7, 1000, 4099};
    opt.check_identity = t.size() == 1; // the side channel sends host memory, which NCCL cannot
    allreduce_matrix(t, opt, b);
  });
}

TEST_CASE("nccl passthrough: ncclAllReduce for sum, prod, min, max and avg (ncclAvg)") {
  on_nccl([](nccl_transport& t, device_buffers<cuda_reducer>& b) {
    auto one = [&]<class T, class Op>(type_tag<T>, const Op& op, op_kind k) {
      for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{65537}})
        for (int ip = 0; ip < 2; ++ip) {
          const case_data<T> d = make_case<T>(k, t.size(), t.rank(), n, 3 + n);
          auto in = b.template allocate<T>(n);
          auto out = b.template allocate<T>(n);
          b.upload(in, d.input);
          T* recv = ip ? in.data() : out.data();
          allreduce(t, static_cast<const T*>(in.data()), recv, n, op, passthrough{}, b.reducer());
          const case_id id{"passthrough", type_name<T>(), op_name(k), n,
                           t.size(),      t.rank(),       ip == 1};
          check_equal(b.download(ip ? in : out, n), d.expected, id.str());
        }
    };
    for_each_type({"float", "half", "bfloat16", "double", "int32", "uint8", "int64"},
                  [&]<class T>(type_tag<T> tag) {
                    if constexpr (detail::nccl::data_type<T>().has_value())
                      for_each_op<false>({}, [&](const auto& op, op_kind k) { one(tag, op, k); });
                  });
  });
}

TEST_CASE("nccl transport: alltoall(v), gather(v), scatter(v), reduce_scatterv, allgatherv and "
          "barrier on device memory") {
  on_nccl([](nccl_transport& t, device_buffers<cuda_reducer>& b) {
    alltoall_values(t, {0, 1, 1000}, b);
    gather_scatter_values(t, {1, 1000}, b);
    uneven_block_values(t, {0, 1, 1000}, b);
    barrier_waits_for_every_rank(t, dissemination{}, b);
  });
}

TEST_CASE("nccl transport: bad peer is an invalid_argument naming the rank") {
  on_nccl([](nccl_transport& t, device_buffers<cuda_reducer>&) {
    CHECK_THROWS_AS(t.isend(t.size(), nullptr, 4, 0), invalid_argument);
  });
}

TEST_CASE("nccl transport is stream ordered: allreduce captured in a CUDA graph and replayed") {
  on_nccl([](nccl_transport& t, device_buffers<cuda_reducer>& b) {
    const std::size_t n = 4099;
    const int P = t.size(), r = t.rank();
    auto in = b.template allocate<float>(n);
    auto out = b.template allocate<float>(n);
    auto run_both = [&] {
      allreduce(t, static_cast<const float*>(in.data()), out.data(), n, sum_op{}, ring{},
                b.reducer());
      allreduce(t, static_cast<const float*>(out.data()), out.data(), n, sum_op{}, passthrough{},
                b.reducer());
    };
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    detail::cuda::check(cudaStreamBeginCapture(t.stream(), cudaStreamCaptureModeThreadLocal),
                        "cudaStreamBeginCapture");
    run_both();
    detail::cuda::check(cudaStreamEndCapture(t.stream(), &graph), "cudaStreamEndCapture");
    detail::cuda::check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    for (int round = 0; round < 3; ++round) {
      std::vector<float> h(n);
      for (std::size_t i = 0; i < n; ++i) h[i] = float((i * 7 + r + round) % 13);
      b.upload(in, h);
      detail::cuda::check(cudaGraphLaunch(exec, t.stream()), "cudaGraphLaunch");
      t.synchronize();
      const auto got = b.download(out, n);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int q = 0; q < P; ++q) want += float((i * 7 + q + round) % 13);
        wrong += got[i] != want * float(P); // ring's sum, then summed again by ncclAllReduce
      }
      CHECK_MESSAGE(wrong == 0, "round " << round << ": " << wrong << " wrong elements");
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  });
}
