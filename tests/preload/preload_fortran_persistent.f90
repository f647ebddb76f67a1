! A Fortran 2008 MPI program (`use mpi_f08`, and Open MPI 4's `mpi_f08_ext` for its persistent
! collectives, MPIX_<name>_init from the pcollreq extension) for the preload's tests: Open
! MPI's Fortran bindings call PMPIX_<name>_init, PMPI_Start and PMPI_Startall directly, so
! the preload takes their Fortran entry points itself. Four persistent requests (allreduce,
! broadcast, all-to-all, barrier) are made once, started with MPI_Startall and then with
! MPI_Start on new inputs, every result checked against the value computed here (inputs
! are multiples of 1/8: every sum is exact), and freed; any mismatch stops it with a
! non-zero exit. At MPI_THREAD_MULTIPLE, which tcoll's engine thread needs.
program preload_fortran_persistent
  use mpi_f08
  use mpi_f08_ext
  implicit none
  integer, parameter :: n = 4096, max_ranks = 64
  integer :: rank, np, i, q, errors, run, provided, one, total
  double precision :: d_in(n), d_out(n), d_want(n), b(n)
  integer :: a_in(4 * max_ranks), a_out(4 * max_ranks)
  type(MPI_Request) :: requests(4)

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, np)
  errors = 0
  ! a blocking collective first: it creates tcoll's state of the communicator, which a
  ! persistent init (local, as a non-blocking start) does not
  one = 1
  call MPI_Allreduce(one, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (total /= np) errors = errors + 1

  call MPIX_Allreduce_init(d_in, d_out, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, &
                           MPI_INFO_NULL, requests(1))
  call MPIX_Bcast_init(b, n, MPI_DOUBLE_PRECISION, np - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &
                       requests(2))
  call MPIX_Alltoall_init(a_in, 4, MPI_INTEGER, a_out, 4, MPI_INTEGER, MPI_COMM_WORLD, &
                          MPI_INFO_NULL, requests(3))
  call MPIX_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, requests(4))
  do run = 1, 2
    do i = 1, n
      d_in(i) = rank + i * 0.25d0 + run * 0.125d0
      d_want(i) = 0
      do q = 0, np - 1
        d_want(i) = d_want(i) + (q + i * 0.25d0 + run * 0.125d0)
      end do
      b(i) = -1
      if (rank == np - 1) b(i) = i * 0.5d0 + run
    end do
    d_out = -1
    ! block q of rank r's input is r * 1000 + q * 10 + i + run * 100000
    do q = 0, np - 1
      do i = 1, 4
        a_in(q * 4 + i) = rank * 1000 + q * 10 + i + run * 100000
      end do
    end do
    a_out = -1
    if (run == 1) then
      call MPI_Startall(4, requests)
    else
      do i = 1, 4
        call MPI_Start(requests(i))
      end do
    end if
    call MPI_Waitall(4, requests, MPI_STATUSES_IGNORE)
    if (any(d_out /= d_want)) errors = errors + 1
    do i = 1, n
      if (b(i) /= i * 0.5d0 + run) then
        errors = errors + 1
        exit
      end if
    end do
    do q = 0, np - 1
      do i = 1, 4
        if (a_out(q * 4 + i) /= q * 1000 + rank * 10 + i + run * 100000) then
          errors = errors + 1
          exit
        end if
      end do
    end do
  end do
  do i = 1, 4
    call MPI_Request_free(requests(i))
  end do

  if (errors /= 0) then
    print '(a, i0, a, i0, a)', 'rank ', rank, ': ', errors, ' checks failed'
    call MPI_Abort(MPI_COMM_WORLD, 1)
  end if
  if (rank == 0) print '(a)', 'preload_fortran_persistent: completed'
  call MPI_Finalize()
end program preload_fortran_persistent
