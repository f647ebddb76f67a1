/* An unmodified MPI timing loop (it calls only MPI): float-sum MPI_Allreduce, out of place,
 * from -b to -e bytes (factor -f), printing one line per size on rank 0:
 *   size_bytes  time_us (median over -r timed blocks of -n calls each)  busbw_GBps  wrong
 * Run it with and without LD_PRELOAD=libtcoll_mpi.so (bench/preload/run.sh does both). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static size_t parse_bytes(const char* s) {
  char* end = NULL;
  size_t v = strtoull(s, &end, 10);
  if (*end == 'K') v <<= 10;
  if (*end == 'M') v <<= 20;
  if (*end == 'G') v <<= 30;
  return v;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, P;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  size_t lo = 8, hi = 64u << 20, factor = 8;
  int blocks = 5;
  double budget = 0.2; /* seconds of timed calls per block, about */
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) lo = parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-e")) hi = parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-f")) factor = parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-r")) blocks = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-t")) budget = atof(argv[i + 1]);
  }
  float *in = malloc(hi), *out = malloc(hi);
  for (size_t i = 0; i < hi / sizeof(float); ++i) in[i] = (float)((rank + i) % 7);
  if (rank == 0) printf("# ranks %d\n# bytes time_us busbw_GBps wrong\n", P);
  size_t sizes[64];
  int nsizes = 0;
  for (size_t b = lo; b <= hi && nsizes < 63; b *= factor) sizes[nsizes++] = b;
  if (nsizes == 0 || sizes[nsizes - 1] != hi) sizes[nsizes++] = hi; /* -e is always measured */
  for (int s = 0; s < nsizes; ++s) {
    const size_t bytes = sizes[s];
    const int n = (int)(bytes / sizeof(float));
    /* calibrate: calls per block so that a block takes about `budget` seconds */
    MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = MPI_Wtime();
    MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    t = MPI_Wtime() - t;
    MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int calls = (int)(budget / (t > 1e-7 ? t : 1e-7));
    if (calls < 2) calls = 2;
    if (calls > 20000) calls = 20000;
    double times[64];
    if (blocks > 64) blocks = 64;
    for (int b = 0; b < blocks; ++b) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int c = 0; c < calls; ++c) MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = (MPI_Wtime() - t0) / calls, worst = 0;
      MPI_Reduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      times[b] = worst;
    }
    long wrong = 0;
    for (int i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < P; ++q) want += (float)((q + i) % 7);
      wrong += out[i] != want;
    }
    if (rank == 0) {
      qsort(times, (size_t)blocks, sizeof(double), cmp);
      const double med = times[blocks / 2];
      printf("%zu %.3f %.3f %ld\n", bytes, med * 1e6, (double)bytes / med * 2.0 * (P - 1) / P / 1e9,
             wrong);
      fflush(stdout);
    }
  }
  free(in), free(out);
  MPI_Finalize();
  return 0;
}
