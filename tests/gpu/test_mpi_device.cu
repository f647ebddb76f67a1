// mpi_device transport under mpirun (suite 'gpu-mpi'; the GPU machine of issue 4 has no MPI,
// so it is not part of suite 'gpu'): the staged path (pinned host segments, small segments
// so messages pipeline) and, when MPI reports CUDA support, the CUDA-aware path, running
// the foundation's allreduce and collectives bodies on device memory with the cuda reducer.
// Every rank exits 77 without a CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include <tcoll/reduce/cuda.cuh>
#include <tcoll/transport/mpi_device.hpp>

#include "../common/collective_cases.hpp"
#include "device_buffers.hpp"

using namespace tcoll;
using namespace tcoll::testing;

namespace {
template <class F>
void on_mpi_device(mpi_device_options knobs, F&& f) {
  cudaStream_t s = nullptr;
  detail::cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  {
    mpi_device_transport t(MPI_COMM_WORLD, s, mpi_options{gpu_timeout}, knobs);
    device_buffers<cuda_reducer> b{s, t.rank()};
    f(t, b);
  }
  (void)cudaStreamDestroy(s);
}
} // namespace

TEST_CASE("mpi_device staged: pipelined segments, allreduce and collectives on device memory") {
  mpi_device_options k;
  k.mode = mpi_device_options::path::staged;
  k.segment_bytes = 4096 + 12; // many segments, odd boundaries
  on_mpi_device(k, [](mpi_device_transport& t, device_buffers<cuda_reducer>& b) {
    CHECK_FALSE(t.cuda_aware());
    const std::vector<std::size_t> counts = {0, 1, 1000, 100003};
    for (std::size_t n : counts) {
      const case_id id{"ring", "float", "sum", n, t.size(), t.rank(), false};
      allreduce_case<mpi_device_transport, float>(t, ring{}, sum_op{}, op_kind::sum, n, false, id,
                                                  5 + n, true, b);
      const case_id id2{"recursive_doubling", "half", "avg", n, t.size(), t.rank(), true};
      allreduce_case<mpi_device_transport, tcoll::half>(t, recursive_doubling{}, avg_op{},
                                                        op_kind::avg, n, true, id2, 9 + n, true, b);
    }
    collectives_values(t, {1, 1001}, 0, b);
  });
}

TEST_CASE("mpi_device CUDA-aware path (when the MPI library reports CUDA support)") {
  if (!mpi_is_cuda_aware()) {
    MESSAGE("MPI is not CUDA-aware: only the staged path was tested");
    return;
  }
  on_mpi_device({}, [](mpi_device_transport& t, device_buffers<cuda_reducer>& b) {
    CHECK(t.cuda_aware());
    const case_id id{"ring", "float", "sum", 4099, t.size(), t.rank(), false};
    allreduce_case<mpi_device_transport, float>(t, ring{}, sum_op{}, op_kind::sum, 4099, false, id,
                                                3, true, b);
  });
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  int rc = 77;
  if (e != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s)\n",
                e == cudaSuccess ? "0 devices" : cudaGetErrorName(e));
  } else {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    (void)cudaSetDevice(rank % count);
    doctest::Context ctx(argc, argv);
    rc = ctx.run();
  }
  MPI_Finalize();
  return rc;
}
