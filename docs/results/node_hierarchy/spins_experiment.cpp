// The experiment behind docs/benchmarks.md "allreduce_perf -t node": hierarchical<shm, mpi>
// on 2 emulated nodes of 2 ranks, built by hand (as mpi_node_hierarchy does) so that
// shm_options::spins_before_yield is the one given on the command line (2000, the default,
// or 0), against MPI_Allreduce in the same job; float sum of 16 B, 256 B and 4 KiB,
// hierarchical_options<recursive_doubling>, 200 calls per repetition, median of 5 of the
// slowest rank's time per call.
//   mpicxx -std=c++20 -O2 -Iinclude docs/results/node_hierarchy/spins_experiment.cpp -o spin
//   for i in 1 2 3 4; do for s in 2000 0; do
//     scripts/emulated_cluster.sh --np 4 --rate 10gbit -- ./spin $s; done; done
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/transport/mpi.hpp>
#include <tcoll/transport/shm.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int spins = argc > 1 ? std::atoi(argv[1]) : 2000;
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  {
    MPI_Comm node = MPI_COMM_NULL, across = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &node);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &across);
    tcoll::shm_options so;
    so.spins_before_yield = spins;
    tcoll::shm_transport intra(node, so);
    tcoll::mpi_transport inter(across);
    MPI_Comm_free(&node);
    MPI_Comm_free(&across);
    tcoll::hierarchical<tcoll::shm_transport, tcoll::mpi_transport> h(
        intra, &inter, tcoll::hierarchy_shape{rank, size, 2});
    std::vector<float> a(1024, 1.f), b(1024);
    for (std::size_t count : {4, 64, 1024}) {
      std::vector<double> th, tm;
      auto timed = [&](auto call) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 200; ++i) call();
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count() /
                    200;
        MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return us;
      };
      for (int rep = 0; rep < 5; ++rep) {
        th.push_back(timed([&] {
          tcoll::allreduce(h, a.data(), b.data(), count, tcoll::sum_op{},
                           tcoll::hierarchical_options<tcoll::recursive_doubling>{});
        }));
        tm.push_back(timed([&] {
          MPI_Allreduce(a.data(), b.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
        }));
      }
      std::sort(th.begin(), th.end());
      std::sort(tm.begin(), tm.end());
      if (rank == 0)
        std::printf(
            "spins %4d bytes %4zu hierarchical<shm, mpi> %6.1f us  MPI_Allreduce %6.1f us\n", spins,
            count * 4, th[2], tm[2]);
    }
  }
  MPI_Finalize();
}
