/* MPI_Alltoall against a polled MPI_Ialltoall (start, then MPI_Test until done), which is
 * what a vendor all-to-all hook on tcoll's MPI transport would run to keep tcoll's timeouts
 * (the transport's native_allreduce polls MPI_Iallreduce the same way). Float blocks, send
 * buffers of 64 B-16 MiB per rank, the best of 5 repetitions of each, interleaved.
 * Plain MPI, no tcoll; docs/benchmarks.md ("alltoall_perf") has the numbers.
 *   mpicc -O2 bench/ialltoall_polled.c -o ialltoall_polled && mpirun -np 2 ./ialltoall_polled */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int r, P;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  for (size_t bytes = 64; bytes <= (16u << 20); bytes *= 4) {
    int n = (int)(bytes / 4 / P);
    if (n < 1) n = 1;
    float* s = malloc(sizeof(float) * n * P);
    float* d = malloc(sizeof(float) * n * P);
    for (int i = 0; i < n * P; ++i) s[i] = i;
    int iters = bytes < 65536 ? 2000 : bytes < (1 << 22) ? 100 : 10;
    double best[2] = {1e9, 1e9};
    for (int rep = 0; rep < 5; ++rep)
      for (int mode = 0; mode < 2; ++mode) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        for (int it = 0; it < iters; ++it) {
          if (mode == 0)
            MPI_Alltoall(s, n, MPI_FLOAT, d, n, MPI_FLOAT, MPI_COMM_WORLD);
          else {
            MPI_Request q;
            int f = 0;
            MPI_Ialltoall(s, n, MPI_FLOAT, d, n, MPI_FLOAT, MPI_COMM_WORLD, &q);
            while (!f) MPI_Test(&q, &f, MPI_STATUS_IGNORE);
          }
        }
        t = (MPI_Wtime() - t) / iters * 1e6;
        if (t < best[mode]) best[mode] = t;
      }
    if (!r)
      printf("%zu alltoall %.2f ialltoall+test %.2f ratio %.2f\n", bytes, best[0], best[1],
             best[0] / best[1]);
    free(s);
    free(d);
  }
  MPI_Finalize();
}
