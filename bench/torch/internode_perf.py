"""The tcoll backend's two engines between nodes side by side: MPI and Gloo's send/recv.

Run under Open MPI's mpirun, as root (each rank takes a host name of its own in a UTS
namespace, so that ranks 0..P/2-1 and P/2..P-1 look like two nodes to tcoll):

    mpirun --allow-run-as-root --oversubscribe -np 4 --mca btl self,tcp \\
        .venv/bin/python bench/torch/internode_perf.py [--json out.json] [-b 8] [-e 32M]

Every rank joins the default group on Gloo (barriers, and the reduction of timings) and
two tcoll groups over the same ranks: one made with TCOLL_TORCH_INTERNODE=mpi, one with
TCOLL_TORCH_INTERNODE=gloo. Each size is timed on both, alternating, as collectives_perf.py
times a call (each waited, medians of the repeats, the slowest rank's time). all_reduce runs
on the two-level machine (shared memory inside each emulated node, the engine between
them); the other collectives run between all ranks over the engine unless a rule (below)
puts them on the machine. With
`--mca btl self,tcp` MPI's messages go over loopback TCP, as Gloo's do; the nodes share
this machine's cores and memory, so this compares the engines' costs, not a network.
TCOLL_<collective>_ALGO rules in the environment apply to both groups (a rule naming
`hierarchical` puts that collective on the two-level machine); the JSON records them.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "torch"))
sys.path.insert(0, HERE)

from collectives_perf import BUS_FACTOR, make_call, parse_size, time_calls  # noqa: E402
from harness import set_hostname  # noqa: E402

OPS = ["all_reduce", "all_gather_into_tensor"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-b", "--begin", type=parse_size, default=8)
    parser.add_argument("-e", "--end", type=parse_size, default=32 << 20)
    parser.add_argument("-f", "--factor", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--target-s", type=float, default=0.1)
    parser.add_argument("--max-iters", type=int, default=2000)
    parser.add_argument("--store", default=os.path.join(tempfile.gettempdir(),
                                                        "tcoll-internode-perf-store"))
    parser.add_argument("--ops", default=",".join(OPS),
                        help="comma-separated: all_reduce, broadcast, all_gather_into_tensor, "
                        "reduce_scatter_tensor, all_to_all_single (default: %(default)s)")
    parser.add_argument("--json")
    args = parser.parse_args()
    ops = args.ops.split(",")
    for op in ops:
        if op not in BUS_FACTOR:
            parser.error(f"--ops: unknown op {op!r}; known: {', '.join(BUS_FACTOR)}")
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    if not set_hostname("node%d" % (rank * 2 // size)):
        sys.exit("internode_perf: cannot make a UTS namespace (run as root)")
    import tcoll_torch

    torch.set_num_threads(1)
    if rank == 0 and os.path.exists(args.store):
        os.remove(args.store)
    dist.init_process_group("gloo", init_method="file://" + args.store + ".%s" %
                            os.environ.get("OMPI_MCA_ess_base_jobid", "job"), rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=600))
    groups = {}
    for engine in ("mpi", "gloo"):
        os.environ["TCOLL_TORCH_INTERNODE"] = engine
        groups[engine] = dist.new_group(list(range(size)), backend="tcoll")
        got = tcoll_torch._C.internode_of(groups[engine]._get_backend(torch.device("cpu")))
        assert got == engine, (engine, got)
    rows = []
    if rank == 0:
        print(f"# torch {torch.__version__}, {size} processes on 2 emulated nodes, float32, "
              f"us per call, median of {args.reps}; busbw in GB/s")
        print(f"{'op':24s} {'bytes':>11s} {'mpi_us':>11s} {'mpi_bw':>8s} {'gloo_us':>11s} "
              f"{'gloo_bw':>8s} {'mpi/gloo':>8s}", flush=True)
    nbytes = args.begin
    while nbytes <= args.end:
        for op in ops:
            medians = {}
            for engine, group in groups.items():
                call = make_call(op, nbytes, size, group)
                probe = torch.tensor([time_calls(call, 2, 1, group)], dtype=torch.float64)
                dist.all_reduce(probe, op=dist.ReduceOp.MAX)
                iters = int(max(2, min(args.max_iters, args.target_s / max(probe.item(), 1e-7))))
                samples = torch.tensor([time_calls(call, iters, 1, group)
                                        for _ in range(args.reps)], dtype=torch.float64)
                dist.all_reduce(samples, op=dist.ReduceOp.MAX)
                medians[engine] = statistics.median(samples.tolist())
            if rank == 0:
                bus = BUS_FACTOR[op](size)
                row = {"op": op, "bytes": nbytes, "ranks": size,
                       "speedup": medians["gloo"] / medians["mpi"]}
                for engine, sec in medians.items():
                    row[engine] = {"time_us": sec * 1e6, "busbw_GBps": nbytes / sec / 1e9 * bus}
                rows.append(row)
                print(f"{op:24s} {nbytes:>11d} {medians['mpi'] * 1e6:11.1f} "
                      f"{row['mpi']['busbw_GBps']:8.3f} {medians['gloo'] * 1e6:11.1f} "
                      f"{row['gloo']['busbw_GBps']:8.3f} {row['speedup']:8.2f}", flush=True)
        nbytes *= args.factor
    dist.destroy_process_group()
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            rules = {k: v for k, v in os.environ.items()
                     if k.startswith("TCOLL_") and k.endswith("_ALGO")}
            json.dump({"torch": torch.__version__, "ranks": size, "reps": args.reps,
                       "rules": rules, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
