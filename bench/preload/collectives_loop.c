/* An unmodified MPI timing loop (it calls only MPI) for MPI_Bcast (root 0), MPI_Reduce
 * (float sum, root 0), MPI_Allgather and MPI_Reduce_scatter_block (float sum), out of place,
 * from -b to -e bytes (factor -f; the bytes are the collective's whole buffer: the broadcast
 * or reduced vector, all P gathered blocks, all P blocks reduced), one line per size on
 * rank 0:  collective size_bytes time_us (median over -r blocks of calls) wrong
 * Run it with and without LD_PRELOAD=libtcoll_mpi.so (bench/preload/run_collectives.sh). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop_common.h"

static int rank, P;
static float *in, *out;

/* One call of collective `c` on `bytes` of whole buffer. */
static void call(int c, size_t bytes) {
  const int n = (int)(bytes / sizeof(float)), block = n / P;
  if (c == 0) MPI_Bcast(in, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (c == 1) MPI_Reduce(in, out, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (c == 2) MPI_Allgather(in, block, MPI_FLOAT, out, block, MPI_FLOAT, MPI_COMM_WORLD);
  if (c == 3) MPI_Reduce_scatter_block(in, out, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

struct args {
  int c;
  size_t bytes;
};
static void call_once(void* p) {
  const struct args* a = p;
  call(a->c, a->bytes);
}

/* Elements wrong after the last call (inputs are rank-dependent small integers). */
static long check(int c, size_t bytes) {
  const int n = (int)(bytes / sizeof(float)), block = n / P;
  long wrong = 0;
  for (int i = 0; i < n; ++i) {
    float want = 0;
    if (c == 0) want = (float)(i % 7); /* root 0's values */
    if (c == 1 && rank != 0) break;
    if (c == 1)
      for (int q = 0; q < P; ++q) want += (float)((q + i) % 7);
    if (c == 2 && i >= block * P) break;
    if (c == 2) want = (float)((i / block + i % block) % 7);
    if (c == 3 && i >= block) break;
    if (c == 3)
      for (int q = 0; q < P; ++q) want += (float)((q + rank * block + i) % 7);
    wrong += (c == 0 ? in[i] : out[i]) != want;
  }
  return wrong;
}

static void reset(size_t bytes) {
  for (size_t i = 0; i < bytes / sizeof(float); ++i) in[i] = (float)((rank + i) % 7);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  size_t lo = 4096, hi = 16u << 20, factor = 4;
  int blocks = 5;
  double budget = 0.1; /* seconds of timed calls per block, about */
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) lo = loop_parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-e")) hi = loop_parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-f")) factor = loop_parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-r")) blocks = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-t")) budget = atof(argv[i + 1]);
  }
  in = malloc(hi), out = malloc(hi);
  const char* names[4] = {"MPI_Bcast", "MPI_Reduce", "MPI_Allgather", "MPI_Reduce_scatter_block"};
  if (rank == 0) printf("# ranks %d\n# collective bytes time_us wrong\n", P);
  for (int c = 0; c < 4; ++c)
    for (size_t bytes = lo; bytes <= hi; bytes *= factor) {
      if (bytes / sizeof(float) < (size_t)P) continue;
      reset(bytes);
      struct args a = {c, bytes};
      const double med = loop_median_seconds(call_once, &a, blocks, budget);
      long wrong = check(c, bytes), all = 0;
      MPI_Reduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        printf("%s %zu %.3f %ld\n", names[c], bytes, med * 1e6, all);
        fflush(stdout);
      }
    }
  free(in), free(out);
  MPI_Finalize();
  return 0;
}
