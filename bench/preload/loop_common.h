/* What the timing loops of bench/preload share (plain C, only MPI calls): size parsing and
 * the calibrated, blocked timing of one call. */
#ifndef TCOLL_BENCH_PRELOAD_LOOP_COMMON_H
#define TCOLL_BENCH_PRELOAD_LOOP_COMMON_H
#include <mpi.h>
#include <stdlib.h>

static int loop_cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* "64", "8K", "16M", "1G" (binary multiples). */
static size_t loop_parse_bytes(const char* s) {
  char* end = NULL;
  size_t v = strtoull(s, &end, 10);
  if (*end == 'K') v <<= 10;
  if (*end == 'M') v <<= 20;
  if (*end == 'G') v <<= 30;
  return v;
}

/* Seconds per call of `call(ctx)` on the slowest rank, the median over `blocks` (at most 64)
 * blocks of back-to-back calls after a barrier; a warm-up call and one timed call set the
 * calls per block so that a block takes about `budget` seconds. Valid on rank 0 only. */
static double loop_median_seconds(void (*call)(void*), void* ctx, int blocks, double budget) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (blocks > 64) blocks = 64;
  if (blocks < 1) blocks = 1;
  call(ctx);
  double t = MPI_Wtime();
  call(ctx);
  t = MPI_Wtime() - t;
  MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  int calls = (int)(budget / (t > 1e-7 ? t : 1e-7));
  if (calls < 2) calls = 2;
  if (calls > 20000) calls = 20000;
  double times[64];
  for (int b = 0; b < blocks; ++b) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int c = 0; c < calls; ++c) call(ctx);
    double dt = (MPI_Wtime() - t0) / calls, worst = 0;
    MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    times[b] = worst;
  }
  if (rank != 0) return 0;
  qsort(times, (size_t)blocks, sizeof(double), loop_cmp);
  return times[blocks / 2];
}

#endif
