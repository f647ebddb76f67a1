#!/usr/bin/env python3
"""An ordinary mpi4py program (Debian's python3-mpi4py, no tcoll in sight) that allreduces
buffers (comm.Allreduce, in place and not, several types, ops and sizes, on the world and on
a split) and Python objects (comm.allreduce), and prints every rank's results as RESULT lines.
run_preload.py runs it with and without libtcoll_mpi.so and requires identical lines.
Inputs are small integers and quarters, so every sum is exact in any order."""
import array
import ctypes
import hashlib

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def digest(buf):
    return hashlib.sha256(memoryview(buf).cast("B")).hexdigest()[:16]


def values(code, n, r, salt):
    if code in "fd":
        return [((r * 7 + i * 3 + salt) % 17 - 8) / 4 for i in range(n)]
    if code in "BHIL":
        return [(r * 7 + i * 3 + salt) % 17 for i in range(n)]
    return [(r * 7 + i * 3 + salt) % 17 - 8 for i in range(n)]


results = []
ops = {"SUM": MPI.SUM, "MAX": MPI.MAX, "MIN": MPI.MIN, "PROD": MPI.PROD}
for name, c in [("world", comm), ("split", comm.Split(rank % 2, -rank))]:
    r = c.Get_rank()
    for code in "bBhiIlfd":
        for n in (1, 7, 4099, 70001) if code in "bid" else (1, 7, 4099):
            for opname in ("SUM", "MAX") if n > 7 else ("SUM", "MAX", "MIN", "PROD"):
                src = array.array(code, values(code, n, r, len(opname)))
                if opname == "PROD":
                    src = array.array(code, [1 + (r + i) % 2 for i in range(n)])
                dst = array.array(code, [0] * n)
                c.Allreduce(src, dst, op=ops[opname])
                inplace = array.array(code, src)
                c.Allreduce(MPI.IN_PLACE, inplace, op=ops[opname])
                results.append(f"{name} {code} {n} {opname} {digest(dst)} {digest(inplace)}")
    # Python objects: mpi4py reduces them itself after MPI_Allgather-based exchanges.
    results.append(f"{name} object sum {c.allreduce(r + 1, op=MPI.SUM)}")
    results.append(f"{name} object max {c.allreduce([r, -r], op=MPI.MAX)}")
    results.append(f"{name} object float {c.allreduce(r / 4 + 0.5, op=MPI.SUM)}")
    results.append(f"{name} bcast {c.bcast({'root': 'data', 'n': 3} if r == 0 else None, root=0)}")
    if c is not comm:
        c.Free()

# Is the preload loaded? (Reported apart from the RESULT lines, which must not differ.)
try:
    counts = ctypes.CDLL(None).tcoll_mpi_counts
    through, fell_back = ctypes.c_ulonglong(), ctypes.c_ulonglong()
    counts(ctypes.byref(through), ctypes.byref(fell_back))
    loaded = f"{through.value} calls through tcoll, {fell_back.value} fell back"
except AttributeError:
    loaded = "not loaded"

# Rank 0 prints everyone's lines (lines of several ranks would interleave on mpirun's pipes).
everyone = comm.gather((results, loaded), root=0)
if rank == 0:
    out = [f"RESULT rank {r}/{size}: {line}" for r, (lines, _) in enumerate(everyone)
           for line in lines]
    out += [f"PRELOAD rank {r}: {info}" for r, (_, info) in enumerate(everyone)]
    print("\n".join(out), flush=True)
