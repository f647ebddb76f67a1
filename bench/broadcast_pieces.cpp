// broadcast_pieces: the broadcast over shared memory on the ranks of one node, four ways
// side by side in one job, interleaved repetition by repetition (so that both states of a
// VM that switches between a fast and a slow one hit every way alike):
//   pieces   the collective area in pieces of `in_segment::broadcast_piece_bytes` (-p)
//   onepiece the collective area in pieces of its bulk buffer (the broadcast before pieces)
//   tree     the binomial tree over the transport's messages (single copy from 64 KiB)
//   MPI      MPI_Bcast on the same processes, at the MPI's defaults
// Every call is followed by the transport's barrier (IMB calls MPI_Barrier between its timed
// calls too); the root rotates. Time per call (broadcast and barrier) is the largest over
// the ranks, the median of the repetitions. With -c the buffers cycle through 64 MiB (cold,
// as IMB's -off_cache); the last call of each way is checked on every rank (exit code 3 on
// a wrong value).
//
//   mpirun -np 2 build/bench/broadcast_pieces [-p 8192] [-c] [-b 32K] [-e 4M] [-r 11]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <tcoll/collectives.hpp>
#include <tcoll/transport/shm.hpp>

namespace {

std::size_t parse_size(const char* s) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  const char unit = end && *end ? *end : ' ';
  const double scale = unit == 'K' ? 1024.0 : unit == 'M' ? 1048576.0 : 1.0;
  return static_cast<std::size_t>(v * scale);
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  std::size_t piece = tcoll::in_segment{}.broadcast_piece_bytes, lo = 32 << 10, hi = 4 << 20;
  bool cold = false;
  int reps = 11;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-c")
      cold = true;
    else if (i + 1 < argc && a == "-p")
      piece = parse_size(argv[++i]);
    else if (i + 1 < argc && a == "-b")
      lo = parse_size(argv[++i]);
    else if (i + 1 < argc && a == "-e")
      hi = parse_size(argv[++i]);
    else if (i + 1 < argc && a == "-r")
      reps = std::max(1, std::atoi(argv[++i]));
    else {
      if (rank == 0)
        std::fprintf(stderr,
                     "usage: broadcast_pieces [-p piece] [-c] [-b min] [-e max] [-r reps]\n");
      MPI_Finalize();
      return 2;
    }
  }
  int wrong = 0;
  {
    tcoll::shm_transport t(MPI_COMM_WORLD, tcoll::shm_options{});
    const std::size_t pool = cold ? std::size_t{64} << 20 : 0;
    std::vector<unsigned char> memory(std::max(pool, 2 * hi) + hi + 4096);
    const char* names[] = {"pieces", "onepiece", "tree", "MPI"};
    if (rank == 0)
      std::printf("# broadcast_pieces: %d ranks, piece %zu bytes (used: %s), %s buffers, median of "
                  "%d interleaved repetitions, us per broadcast + barrier (max over ranks)\n"
                  "%10s %10s %10s %10s %10s %9s %9s\n",
                  P, piece, t.segment_area().ranks_have_cpus() ? "yes" : "no (ranks share CPUs)",
                  cold ? "cold" : "hot", reps, "bytes", names[0], names[1], names[2], names[3],
                  "MPI/pcs", "tree/pcs");
    for (std::size_t bytes = lo; bytes <= hi; bytes *= 2) {
      const int iters = static_cast<int>(std::clamp<std::size_t>((64u << 20) / bytes, 10, 300));
      std::vector<double> times[4];
      for (int rep = 0; rep < reps; ++rep)
        for (int way = 0; way < 4; ++way) {
          MPI_Barrier(MPI_COMM_WORLD);
          std::size_t off = 0;
          unsigned char* buf = memory.data();
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < iters; ++i) {
            buf = memory.data() + off;
            if (cold) off = (off + bytes + 4096) % pool;
            const int root = i % P;
            if (rank == root)
              for (std::size_t k = 0; k < bytes; k += 512)
                buf[k] = static_cast<unsigned char>(i + k / 512);
            if (way == 0)
              tcoll::broadcast(t, buf, bytes, root,
                               tcoll::in_segment{.broadcast_piece_bytes = piece});
            else if (way == 1)
              tcoll::broadcast(t, buf, bytes, root,
                               tcoll::in_segment{.broadcast_piece_bytes = std::size_t{1} << 40});
            else if (way == 2)
              tcoll::broadcast(t, buf, bytes, root, tcoll::binomial_tree{});
            else
              MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD);
            t.barrier();
          }
          const double us =
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                  .count() /
              iters;
          for (std::size_t k = 0; k < bytes; k += 512)
            wrong += buf[k] != static_cast<unsigned char>(iters - 1 + k / 512);
          double slowest = 0;
          MPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
          times[way].push_back(slowest);
        }
      double median[4];
      for (int way = 0; way < 4; ++way) {
        std::sort(times[way].begin(), times[way].end());
        median[way] = times[way][times[way].size() / 2];
      }
      if (rank == 0)
        std::printf("%10zu %10.2f %10.2f %10.2f %10.2f %9.2f %9.2f\n", bytes, median[0], median[1],
                    median[2], median[3], median[3] / median[0], median[2] / median[0]);
    }
  }
  int any = 0;
  MPI_Allreduce(&wrong, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && any) std::fprintf(stderr, "broadcast_pieces: %d wrong bytes\n", any);
  MPI_Finalize();
  return any ? 3 : 0;
}
