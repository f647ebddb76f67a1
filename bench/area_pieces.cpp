// area_pieces: the broadcast (-o broadcast, the default) or the reduce (-o reduce) over shared
// memory on the ranks of one node, four ways side by side in one job, interleaved repetition
// by repetition (so that both states of a VM that switches between a fast and a slow one hit
// every way alike):
//   pieces   the collective area in pieces of -p bytes (`in_segment::broadcast_piece_bytes`,
//            `in_segment::reduce_piece_bytes`)
//   nopieces the collective area without them: the broadcast in pieces of its bulk buffer,
//            the reduce by whole copies (below `in_segment::slices_from_bytes`) or slices
//   tree     the binomial tree over the transport's messages (single copy from 64 KiB)
//   MPI      MPI_Bcast / MPI_Reduce on the same processes, at the MPI's defaults
// Every call is followed by the transport's barrier (IMB calls MPI_Barrier between its timed
// calls too); the root rotates, and writes one value into every cache line of its data first
// (the reduce: every rank). Time per call (collective and barrier) is the largest over
// the ranks, the median of the repetitions. With -c the buffers cycle through 64 MiB (cold,
// as IMB's -off_cache). The reduce sums doubles with fractional values (exact in any order);
// the last call of each way is checked on every rank (broadcast) or at its root (reduce):
// exit code 3 on a wrong value.
//
//   mpirun -np 2 build/bench/area_pieces [-o reduce] [-p 8192] [-c] [-b 32K] [-e 4M] [-r 11]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <tcoll/collectives.hpp>
#include <tcoll/transport/shm.hpp>

namespace {

/// Rank `r`'s input element `k` of call `i` of the reduce: quarters, so that every sum is
/// exact whatever the order.
double reduce_input(int r, int i, std::size_t k) {
  return 0.25 * static_cast<double>((r + 1) * 3 + i % 5 + static_cast<int>(k % 11));
}

/// Every call writes one value into every cache line of its input first, as an application
/// hands over freshly computed data: a line left unchanged since the last call may still be
/// in the reader's cache, and one copy straight from the sender's buffer would gain from it.
constexpr std::size_t line = 64;

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  std::size_t piece = tcoll::in_segment{}.broadcast_piece_bytes, lo = 32 << 10, hi = 4 << 20;
  bool cold = false, reduce = false;
  int reps = 11;
  bool usage = false;
  for (int i = 1; i < argc && !usage; ++i) try {
      const std::string a = argv[i];
      if (a == "-c")
        cold = true;
      else if (i + 1 < argc && a == "-o" &&
               (argv[i + 1] == std::string("reduce") || argv[i + 1] == std::string("broadcast")))
        reduce = argv[++i] == std::string("reduce");
      else if (i + 1 < argc && a == "-p")
        piece = tcoll::parse_bytes(argv[++i]);
      else if (i + 1 < argc && a == "-b")
        lo = tcoll::parse_bytes(argv[++i]);
      else if (i + 1 < argc && a == "-e")
        hi = tcoll::parse_bytes(argv[++i]);
      else if (i + 1 < argc && a == "-r")
        reps = std::max(1, std::atoi(argv[++i]));
      else
        usage = true;
    } catch (const tcoll::invalid_argument&) { // a size parse_bytes does not read
      usage = true;
    }
  if (usage || lo == 0 || (reduce && lo < sizeof(double))) {
    if (rank == 0)
      std::fprintf(stderr, "usage: area_pieces [-o broadcast|reduce] [-p piece] [-c] [-b min] "
                           "[-e max] [-r reps] (min of a reduce: 8 bytes)\n");
    MPI_Finalize();
    return 2;
  }
  int wrong = 0;
  {
    tcoll::shm_transport t(MPI_COMM_WORLD, tcoll::shm_options{});
    const std::size_t pool = cold ? std::size_t{64} << 20 : 0;
    // the reduce's inputs and outputs lie side by side in the pool
    std::vector<double> memory((std::max(pool, 4 * hi) + 2 * hi + 4096) / sizeof(double));
    const char* names[] = {"pieces", "nopieces", "tree", "MPI"};
    if (rank == 0)
      std::printf("# area_pieces: %s, %d ranks, piece %zu bytes (ranks have a CPU each: %s), %s "
                  "buffers, median of %d interleaved repetitions, us per call + barrier (max "
                  "over ranks)\n%10s %10s %10s %10s %10s %9s %9s\n",
                  reduce ? "reduce" : "broadcast", P, piece,
                  t.segment_area().ranks_have_cpus() ? "yes" : "no", cold ? "cold" : "hot", reps,
                  "bytes", names[0], names[1], names[2], names[3], "MPI/pcs", "tree/pcs");
    auto* base = reinterpret_cast<unsigned char*>(memory.data());
    const std::size_t none = std::size_t{1} << 40; // a piece larger than any bulk buffer
    for (std::size_t bytes = lo; bytes <= hi; bytes *= 2) {
      const int iters = static_cast<int>(std::clamp<std::size_t>((64u << 20) / bytes, 10, 300));
      const std::size_t count = bytes / sizeof(double);
      std::vector<double> times[4];
      for (int rep = 0; rep < reps; ++rep)
        for (int way = 0; way < 4; ++way) {
          MPI_Barrier(MPI_COMM_WORLD);
          std::size_t off = 0;
          unsigned char* buf = base;
          double *in = nullptr, *out = nullptr;
          int root = 0;
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < iters; ++i) {
            buf = base + off;
            if (cold) off = (off + 2 * bytes + 4096) / 64 * 64 % pool;
            root = i % P;
            if (reduce) {
              in = reinterpret_cast<double*>(buf);
              out = in + count;
              for (std::size_t k = 0; k < count; k += line / sizeof(double))
                in[k] = reduce_input(rank, i, k);
              if (way == 0)
                tcoll::reduce(t, in, out, count, root, tcoll::sum_op{},
                              tcoll::in_segment{.reduce_piece_bytes = piece});
              else if (way == 1)
                tcoll::reduce(t, in, out, count, root, tcoll::sum_op{},
                              tcoll::in_segment{.reduce_piece_bytes = 0});
              else if (way == 2)
                tcoll::reduce(t, in, out, count, root, tcoll::sum_op{}, tcoll::binomial_tree{});
              else
                MPI_Reduce(in, out, static_cast<int>(count), MPI_DOUBLE, MPI_SUM, root,
                           MPI_COMM_WORLD);
            } else {
              if (rank == root)
                for (std::size_t k = 0; k < bytes; k += line)
                  buf[k] = static_cast<unsigned char>(i + k / line);
              if (way == 0)
                tcoll::broadcast(t, buf, bytes, root,
                                 tcoll::in_segment{.broadcast_piece_bytes = piece});
              else if (way == 1)
                tcoll::broadcast(t, buf, bytes, root,
                                 tcoll::in_segment{.broadcast_piece_bytes = none});
              else if (way == 2)
                tcoll::broadcast(t, buf, bytes, root, tcoll::binomial_tree{});
              else
                MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD);
            }
            t.barrier();
          }
          const double us =
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                  .count() /
              iters;
          if (!reduce) {
            for (std::size_t k = 0; k < bytes; k += line)
              wrong += buf[k] != static_cast<unsigned char>(iters - 1 + k / line);
          } else if (rank == root) {
            for (std::size_t k = 0; k < count; k += line / sizeof(double)) {
              double expected = 0;
              for (int r = 0; r < P; ++r) expected += reduce_input(r, iters - 1, k);
              wrong += out[k] != expected;
            }
          }
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
  if (rank == 0 && any) std::fprintf(stderr, "area_pieces: %d wrong values\n", any);
  MPI_Finalize();
  return any ? 3 : 0;
}
