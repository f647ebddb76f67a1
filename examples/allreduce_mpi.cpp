// mpirun -np 4 ./allreduce_mpi : tcoll inside an existing MPI program, next to MPI_Allreduce.
#include <mpi.h>

#include <cstdio>
#include <tcoll/tcoll.hpp>
#include <tcoll/transport/mpi.hpp>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv); // the application owns MPI; tcoll works on a duplicate communicator
  {
    tcoll::mpi_transport t(MPI_COMM_WORLD);
    std::vector<double> in(1000, t.rank() + 1.0), out(in.size());
    tcoll::allreduce(t, in.data(), out.data(), in.size(), tcoll::avg_op{},
                     tcoll::recursive_halving_doubling{});
    std::vector<double> ref(in.size());
    tcoll::allreduce(t, in.data(), ref.data(), in.size(), tcoll::avg_op{}, tcoll::passthrough{});
    if (t.rank() == 0) std::printf("tcoll %.2f, MPI_Allreduce %.2f\n", out[0], ref[0]);
  }
  MPI_Finalize();
}
