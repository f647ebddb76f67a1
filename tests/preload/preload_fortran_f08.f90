! A Fortran 2008 MPI program (`use mpi_f08`, calls only MPI) for the preload's tests: its
! calls reach libtcoll_mpi.so through Open MPI's f08 bindings (which call ompi_<name>_f) or
! MPICH's (which call the C entry points). Fortran's own datatypes, MPI_IN_PLACE, all-to-all,
! gather, scatter, and the non-blocking allreduce, broadcast, all-to-all, gather, scatter,
! gatherv, scatterv and all-to-all-v (at MPI_THREAD_MULTIPLE, which tcoll's engine thread
! needs); every result is checked against the value computed here (inputs are multiples of
! 1/8: every sum is exact); any mismatch stops it with a non-zero exit.
program preload_fortran_f08
  use mpi_f08
  implicit none
  integer, parameter :: n = 5003, max_ranks = 64
  integer :: rank, np, i, q, errors
  double precision :: d_in(n), d_out(n), d_want(n), d_io(n)
  integer :: i_in(n * max_ranks), i_out(n), i_want(n)
  integer :: a2a_in(4 * max_ranks), a2a_out(4 * max_ranks), provided
  double precision :: part(4), parts(4 * max_ranks)
  integer :: counts(max_ranks), displs(max_ranks), rcounts(max_ranks)
  type(MPI_Request) :: request, ring(2)
  integer, asynchronous :: token_in, token_out ! read and written by MPI after the calls return

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, np)
  errors = 0

  do i = 1, n
    d_in(i) = rank + i * 0.25d0
    d_want(i) = 0
    do q = 0, np - 1
      d_want(i) = d_want(i) + (q + i * 0.25d0)
    end do
  end do

  call MPI_Allreduce(d_in, d_out, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
  if (any(d_out /= d_want)) errors = errors + 1
  d_io = d_in
  call MPI_Allreduce(MPI_IN_PLACE, d_io, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
  if (any(d_io /= d_want)) errors = errors + 1
  d_io = d_in
  call MPI_Iallreduce(MPI_IN_PLACE, d_io, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, request)
  call MPI_Wait(request, MPI_STATUS_IGNORE)
  if (any(d_io /= d_want)) errors = errors + 1
  d_out = 0
  call MPI_Reduce(d_in, d_out, n, MPI_DOUBLE_PRECISION, MPI_SUM, np - 1, MPI_COMM_WORLD)
  if (rank == np - 1 .and. any(d_out /= d_want)) errors = errors + 1
  if (rank /= 0) d_out = 0
  if (rank == 0) d_out = d_want
  call MPI_Bcast(d_out, n, MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD)
  if (any(d_out /= d_want)) errors = errors + 1
  ! reduce-scatter: block q of every rank's input is q * n + i + rank
  do q = 0, np - 1
    do i = 1, n
      i_in(q * n + i) = q * n + i + rank
    end do
  end do
  do i = 1, n
    i_want(i) = np * (rank * n + i) + np * (np - 1) / 2
  end do
  call MPI_Reduce_scatter_block(i_in, i_out, n, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (any(i_out /= i_want)) errors = errors + 1
  ! all-to-all, blocking then non-blocking: block q of rank r's input is r * 1000 + q * 10 + i
  do q = 0, np - 1
    do i = 1, 4
      a2a_in(q * 4 + i) = rank * 1000 + q * 10 + i
    end do
  end do
  a2a_out = -1
  call MPI_Alltoall(a2a_in, 4, MPI_INTEGER, a2a_out, 4, MPI_INTEGER, MPI_COMM_WORLD)
  do q = 0, np - 1
    do i = 1, 4
      if (a2a_out(q * 4 + i) /= q * 1000 + rank * 10 + i) errors = errors + 1
    end do
  end do
  a2a_out = -1
  call MPI_Ialltoall(a2a_in, 4, MPI_INTEGER, a2a_out, 4, MPI_INTEGER, MPI_COMM_WORLD, request)
  call MPI_Wait(request, MPI_STATUS_IGNORE)
  do q = 0, np - 1
    do i = 1, 4
      if (a2a_out(q * 4 + i) /= q * 1000 + rank * 10 + i) errors = errors + 1
    end do
  end do
  ! gather to the last rank, scatter from rank 0: rank q's part is q + i / 4
  do i = 1, 4
    part(i) = rank + i * 0.25d0
  end do
  parts = -1
  call MPI_Gather(part, 4, MPI_DOUBLE_PRECISION, parts, 4, MPI_DOUBLE_PRECISION, np - 1, &
                  MPI_COMM_WORLD)
  if (rank == np - 1) then
    do q = 0, np - 1
      do i = 1, 4
        if (parts(q * 4 + i) /= q + i * 0.25d0) errors = errors + 1
      end do
    end do
  end if
  if (rank == 0) then
    do q = 0, np - 1
      do i = 1, 4
        parts(q * 4 + i) = q + i * 0.25d0
      end do
    end do
  end if
  part = -1
  call MPI_Scatter(parts, 4, MPI_DOUBLE_PRECISION, part, 4, MPI_DOUBLE_PRECISION, 0, &
                   MPI_COMM_WORLD)
  do i = 1, 4
    if (part(i) /= rank + i * 0.25d0) errors = errors + 1
  end do
  ! a non-blocking broadcast from the last rank
  if (rank /= np - 1) d_out = 0
  if (rank == np - 1) d_out = d_want
  call MPI_Ibcast(d_out, n, MPI_DOUBLE_PRECISION, np - 1, MPI_COMM_WORLD, request)
  call MPI_Wait(request, MPI_STATUS_IGNORE)
  if (any(d_out /= d_want)) errors = errors + 1
  ! a non-blocking gather to rank 0 and a non-blocking scatter from the last rank
  do i = 1, 4
    part(i) = rank + i * 0.5d0
  end do
  parts = -1
  call MPI_Igather(part, 4, MPI_DOUBLE_PRECISION, parts, 4, MPI_DOUBLE_PRECISION, 0, &
                   MPI_COMM_WORLD, request)
  call MPI_Wait(request, MPI_STATUS_IGNORE)
  if (rank == 0) then
    do q = 0, np - 1
      do i = 1, 4
        if (parts(q * 4 + i) /= q + i * 0.5d0) errors = errors + 1
      end do
    end do
  end if
  if (rank == np - 1) then
    do q = 0, np - 1
      do i = 1, 4
        parts(q * 4 + i) = q + i * 0.125d0
      end do
    end do
  end if
  part = -1
  call MPI_Iscatter(parts, 4, MPI_DOUBLE_PRECISION, part, 4, MPI_DOUBLE_PRECISION, np - 1, &
                    MPI_COMM_WORLD, request)
  call MPI_Wait(request, MPI_STATUS_IGNORE)
  do i = 1, 4
    if (part(i) /= rank + i * 0.125d0) errors = errors + 1
  end do
  ! the uneven forms: rank q's block is q mod 3 elements (rank 0's empty), 4 q apart
  do q = 0, np - 1
    counts(q + 1) = mod(q, 3)
    displs(q + 1) = 4 * q
  end do
  do i = 1, 4
    part(i) = rank + i * 0.375d0
  end do
  parts = -1
  call MPI_Igatherv(part, mod(rank, 3), MPI_DOUBLE_PRECISION, parts, counts, displs, &
                    MPI_DOUBLE_PRECISION, np - 1, MPI_COMM_WORLD, request)
  call MPI_Wait(request, MPI_STATUS_IGNORE)
  if (rank == np - 1) then
    do q = 0, np - 1
      do i = 1, 4
        if (i <= mod(q, 3) .and. parts(q * 4 + i) /= q + i * 0.375d0) errors = errors + 1
        if (i > mod(q, 3) .and. parts(q * 4 + i) /= -1) errors = errors + 1
      end do
    end do
  end if
  if (rank == 0) then
    do q = 0, np - 1
      do i = 1, 4
        parts(q * 4 + i) = q + i * 0.625d0
      end do
    end do
  end if
  part = -1
  call MPI_Iscatterv(parts, counts, displs, MPI_DOUBLE_PRECISION, part, mod(rank, 3), &
                     MPI_DOUBLE_PRECISION, 0, MPI_COMM_WORLD, request)
  call MPI_Wait(request, MPI_STATUS_IGNORE)
  do i = 1, 4
    if (i <= mod(rank, 3) .and. part(i) /= rank + i * 0.625d0) errors = errors + 1
    if (i > mod(rank, 3) .and. part(i) /= -1) errors = errors + 1
  end do
  ! every rank sends rank q the q mod 3 integers rank * 100 + q * 10 + i, 4 q apart
  do q = 0, np - 1
    do i = 1, 4
      a2a_in(q * 4 + i) = rank * 100 + q * 10 + i
    end do
  end do
  a2a_out = -1
  rcounts = mod(rank, 3) ! from every rank: the count rank q sends to this one
  call MPI_Ialltoallv(a2a_in, counts, displs, MPI_INTEGER, a2a_out, rcounts, displs, &
                      MPI_INTEGER, MPI_COMM_WORLD, request)
  call MPI_Wait(request, MPI_STATUS_IGNORE)
  do q = 0, np - 1
    do i = 1, 4
      if (i <= mod(rank, 3) .and. a2a_out(q * 4 + i) /= q * 100 + rank * 10 + i) errors = errors + 1
      if (i > mod(rank, 3) .and. a2a_out(q * 4 + i) /= -1) errors = errors + 1
    end do
  end do
  ! MPI_Iallgatherv: every rank q's q mod 3 elements land 4 q apart on every rank
  do i = 1, 4
    part(i) = rank + i * 0.875d0
  end do
  parts = -1
  call MPI_Iallgatherv(part, mod(rank, 3), MPI_DOUBLE_PRECISION, parts, counts, displs, &
                       MPI_DOUBLE_PRECISION, MPI_COMM_WORLD, request)
  call MPI_Wait(request, MPI_STATUS_IGNORE)
  do q = 0, np - 1
    do i = 1, 4
      if (i <= mod(q, 3) .and. parts(q * 4 + i) /= q + i * 0.875d0) errors = errors + 1
      if (i > mod(q, 3) .and. parts(q * 4 + i) /= -1) errors = errors + 1
    end do
  end do
  ! MPI_Ireduce_scatter: rank q's block has q mod 3 elements; input element j is rank + j / 4
  rcounts = 0
  do q = 0, np - 1
    rcounts(q + 1) = mod(q, 3)
  end do
  do i = 1, 4 * np
    parts(i) = rank + i * 0.25d0
  end do
  part = -1
  call MPI_Ireduce_scatter(parts, part, rcounts, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, &
                           request)
  call MPI_Wait(request, MPI_STATUS_IGNORE)
  q = sum(rcounts(1:rank)) ! elements before this rank's block
  do i = 1, 4
    if (i <= mod(rank, 3) .and. part(i) /= np * (np - 1) / 2 + np * (q + i) * 0.25d0) &
      errors = errors + 1
    if (i > mod(rank, 3) .and. part(i) /= -1) errors = errors + 1
  end do
  ! MPI_Ibarrier: completes (through tcoll under the test's rule; the C test checks its timing)
  call MPI_Ibarrier(MPI_COMM_WORLD, request)
  call MPI_Wait(request, MPI_STATUS_IGNORE)
  ! persistent point-to-point requests (a ring), started with MPI_Startall and MPI_Start and
  ! freed: the preload takes Fortran's MPI_START, MPI_STARTALL and MPI_REQUEST_FREE (Open
  ! MPI's bindings and MPICH's f08 ones call PMPI_* directly) and hands these to MPI
  call MPI_Send_init(token_out, 1, MPI_INTEGER, mod(rank + 1, np), 7, MPI_COMM_WORLD, ring(1))
  call MPI_Recv_init(token_in, 1, MPI_INTEGER, mod(rank + np - 1, np), 7, MPI_COMM_WORLD, ring(2))
  do q = 1, 2
    token_out = rank * 10 + q
    token_in = -1
    if (q == 1) then
      call MPI_Startall(2, ring)
    else
      call MPI_Start(ring(2))
      call MPI_Start(ring(1))
    end if
    call MPI_Waitall(2, ring, MPI_STATUSES_IGNORE)
    if (token_in /= mod(rank + np - 1, np) * 10 + q) errors = errors + 1
  end do
  call MPI_Request_free(ring(1))
  call MPI_Request_free(ring(2))
  if (ring(1) /= MPI_REQUEST_NULL .or. ring(2) /= MPI_REQUEST_NULL) errors = errors + 1

  if (errors /= 0) then
    print *, 'rank', rank, ':', errors, 'wrong results'
    call MPI_Abort(MPI_COMM_WORLD, 1)
  end if
  if (rank == 0) print *, 'preload_fortran_f08: all results right on', np, 'ranks'
  call MPI_Finalize()
end program preload_fortran_f08
