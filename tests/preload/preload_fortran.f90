! A Fortran MPI program (`use mpi`, calls only MPI) for the preload's MPICH tests: MPICH's
! Fortran bindings call the C entry points, so libtcoll_mpi.so sees these calls, with
! Fortran's own datatypes (MPI_DOUBLE_PRECISION, MPI_REAL, MPI_INTEGER). Each result is
! checked against the value computed here (inputs are multiples of 1/4: every sum is exact);
! any mismatch stops the program with a non-zero exit.
program preload_fortran
  use mpi
  implicit none
  integer, parameter :: n = 5003, max_ranks = 64
  integer :: ierr, rank, np, i, q, errors
  double precision :: d_in(n), d_out(n), d_want(n)
  real :: r_io(n), r_want(n)
  integer :: i_in(n), i_out(n), i_want(n)
  double precision :: gathered(4 * max_ranks)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, np, ierr)
  errors = 0

  do i = 1, n
    d_in(i) = rank + i * 0.25d0
    d_want(i) = 0
    r_io(i) = real(rank) - i * 0.5
    r_want(i) = 0
    i_in(i) = rank * 3 - i
    i_want(i) = 0
    do q = 0, np - 1
      d_want(i) = d_want(i) + (q + i * 0.25d0)
      r_want(i) = r_want(i) + (real(q) - i * 0.5)
      i_want(i) = i_want(i) + (q * 3 - i)
    end do
  end do

  call MPI_Allreduce(d_in, d_out, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (any(d_out /= d_want)) errors = errors + 1
  call MPI_Allreduce(MPI_IN_PLACE, r_io, n, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (any(r_io /= r_want)) errors = errors + 1
  call MPI_Allreduce(i_in, i_out, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (any(i_out /= i_want)) errors = errors + 1
  i_out = 0
  call MPI_Reduce(i_in, i_out, n, MPI_INTEGER, MPI_SUM, np - 1, MPI_COMM_WORLD, ierr)
  if (rank == np - 1 .and. any(i_out /= i_want)) errors = errors + 1
  if (rank /= 0) d_out = 0
  call MPI_Bcast(d_out, n, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, ierr)
  if (any(d_out /= d_want)) errors = errors + 1
  call MPI_Allgather(d_in(1:4), 4, MPI_DOUBLE_PRECISION, gathered, 4, MPI_DOUBLE_PRECISION, &
                     MPI_COMM_WORLD, ierr)
  do q = 0, np - 1
    do i = 1, 4
      if (gathered(q * 4 + i) /= q + i * 0.25d0) errors = errors + 1
    end do
  end do

  if (errors /= 0) then
    print *, 'rank', rank, ':', errors, 'wrong results'
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  if (rank == 0) print *, 'preload_fortran: all results right on', np, 'ranks'
  call MPI_Finalize(ierr)
end program preload_fortran
