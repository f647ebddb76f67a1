"""torch.distributed collectives side by side: backend "tcoll" against "gloo" in one job.

Every process joins the default group on Gloo and a second group with the same ranks on
tcoll; each size is measured on both, alternating, so both see the same machine state.
Time is per call as the PyTorch caller sees it (Python dispatch included): `iters` calls,
each waited, after `warmup` calls, repeated `reps` times; the median of the repeats is
reported. Columns follow nccl-tests: algbw = bytes / time, busbw = algbw x the collective's
bus factor (allreduce 2(P-1)/P, allgather, reduce-scatter and all_to_all_single (P-1)/P,
broadcast 1; all_to_all_single's bytes are one rank's whole send buffer).

    .venv/bin/python bench/torch/collectives_perf.py -np 2 [-b 8] [-e 256M] [-f 4]
        [--ops all_reduce,all_gather_into_tensor,reduce_scatter_tensor,broadcast,all_to_all_single]
        [--json out.json] [--deepspeed]

--deepspeed adds DeepSpeed's CPU shared-memory allreduce (`deepspeed.comm.
inference_all_reduce`, its JIT-built `deepspeed_shm_comm` op) as a third column of the
all_reduce rows, on the same ranks, and then `tcoll_torch.all_reduce` (tcoll's call that,
like DeepSpeed's, bypasses torch.distributed's per-call layers) with its ratio to DeepSpeed. It needs the `deepspeed` package, which the project's
.venv does not carry: `bash bench/torch/setup_extras.sh` makes .venv-extras (the
.venv's torch plus deepspeed from PyPI); run this script with .venv-extras/bin/python.
Processes run with OMP_NUM_THREADS=1 (as torchrun and DeepSpeed's launcher start them
where several share a node) unless it is set.

Bytes are the size of the collective's per-rank tensor as nccl-tests count it: the
allreduce/broadcast buffer, the gathered output of allgather, the input of reduce-scatter.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))

OPS = ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast"]
BUS_FACTOR = {
    "all_reduce": lambda P: 2 * (P - 1) / P,
    "all_gather_into_tensor": lambda P: (P - 1) / P,
    "reduce_scatter_tensor": lambda P: (P - 1) / P,
    "broadcast": lambda P: 1.0,
    "all_to_all_single": lambda P: (P - 1) / P,  # nccl-tests' alltoall: bytes = one send buffer
}


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def make_call(op, nbytes, P, group):
    """A closure running one call of `op` on `group` with float32 buffers of `nbytes`."""
    n = max(1, nbytes // 4)
    if op == "all_reduce":
        x = torch.rand(n)
        return lambda: dist.all_reduce(x, group=group)
    if op == "broadcast":
        x = torch.rand(n)
        return lambda: dist.broadcast(x, src=0, group=group)
    per_rank = max(1, n // P)
    if op == "all_gather_into_tensor":
        x, out = torch.rand(per_rank), torch.empty(per_rank * P)
        return lambda: dist.all_gather_into_tensor(out, x, group=group)
    if op == "all_to_all_single":
        x, out = torch.rand(per_rank * P), torch.empty(per_rank * P)
        return lambda: dist.all_to_all_single(out, x, group=group)
    x, out = torch.rand(per_rank * P), torch.empty(per_rank)
    return lambda: dist.reduce_scatter_tensor(out, x, group=group)


def time_calls(call, iters, warmup, group):
    for _ in range(warmup):
        call()
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        call()
    return (time.perf_counter() - start) / iters


def start_deepspeed(rank, P):
    """deepspeed.comm on the default (Gloo) group, with its shared-memory allreduce built and
    checked: the module, or an exception saying why it cannot run here."""
    # what DeepSpeed's launcher sets: its op maps the shared memory only when LOCAL_SIZE says
    # every rank is on this node, and names the segment after MASTER_ADDR and MASTER_PORT
    os.environ.update(DS_ACCELERATOR="cpu", LOCAL_SIZE=str(P), LOCAL_RANK=str(rank),
                      RANK=str(rank), WORLD_SIZE=str(P), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(29500 + os.getppid() % 20000))
    import deepspeed
    import deepspeed.comm as deepspeed_comm

    deepspeed.init_distributed(dist_backend="gloo")
    backend = deepspeed_comm.comm.cdb
    level = getattr(backend, "shm_vector_kernel_level", 0)
    if getattr(backend, "shm_comm_op", None) is None or level < 1:
        raise RuntimeError(f"deepspeed {deepspeed.__version__}: no shared-memory allreduce for "
                           f"float32 here (op {getattr(backend, 'shm_comm_op', None)}, vector "
                           f"kernel level {level}; it needs AVX2)")
    x = torch.full((1000,), 0.25 + rank)
    deepspeed_comm.inference_all_reduce(x)
    want = sum(0.25 + q for q in range(P))
    if not torch.all(x == want):
        raise RuntimeError(f"deepspeed's shared-memory allreduce gave {x[:3]}, not {want}")
    if rank == 0:
        print(f"# deepspeed {deepspeed.__version__}: shared-memory allreduce on (vector kernel "
              f"level {level})", flush=True)
    return deepspeed_comm


def worker(rank, P, args, store_path):
    import tcoll_torch  # noqa: F401  registers "tcoll"

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store_path, rank=rank,
                            world_size=P, timeout=datetime.timedelta(seconds=600))
    groups = {"gloo": dist.group.WORLD, "tcoll": dist.new_group(list(range(P)),
                                                                 backend="tcoll")}
    deepspeed_comm = start_deepspeed(rank, P) if args.deepspeed else None
    rows = []
    if args.overhead:
        # 8 B all_reduce as Python sees it against the same call straight from C++ on the
        # same transport (tcoll_torch._C.time_raw_allreduce), interleaved, medians
        # and through tcoll_torch.all_reduce (the direct call, without torch's layers)
        backend = groups["tcoll"]._get_backend(torch.device("cpu"))
        x = torch.rand(2)
        py, raw, direct = [], [], []
        for _ in range(args.reps):
            py.append(time_calls(lambda: dist.all_reduce(x, group=groups["tcoll"]), 20000, 100,
                                 groups["tcoll"]))
            raw.append(tcoll_torch._C.time_raw_allreduce(backend, 8, 20000))
            direct.append(time_calls(lambda: tcoll_torch.all_reduce(x, group=groups["tcoll"]),
                                     20000, 100, groups["tcoll"]))
        t = torch.tensor([statistics.median(py), statistics.median(raw),
                          statistics.median(direct)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"overhead: 8 B all_reduce {t[0].item() * 1e6:.2f} us from Python, "
                  f"{t[1].item() * 1e6:.2f} us from C++: {(t[0] - t[1]).item() * 1e6:.2f} us "
                  f"of Python, c10d and Work; tcoll_torch.all_reduce {t[2].item() * 1e6:.2f} "
                  f"us: {(t[2] - t[1]).item() * 1e6:.2f} us over C++", flush=True)
        rows.append({"op": "overhead", "python_us": t[0].item() * 1e6,
                     "cpp_us": t[1].item() * 1e6, "direct_us": t[2].item() * 1e6})
    size = args.begin
    while size <= args.end:
        for op in args.ops:
            medians = {}
            backends = ["tcoll", "gloo"]
            if deepspeed_comm and op == "all_reduce":
                backends += ["deepspeed", "tcoll_direct"]
            for backend in backends:
                group = groups.get(backend, groups["gloo"])
                if backend == "deepspeed":
                    x = torch.rand(max(1, size // 4))
                    call = lambda x=x: deepspeed_comm.inference_all_reduce(x)  # noqa: E731
                elif backend == "tcoll_direct":  # the call like DeepSpeed's, no torch layers
                    x = torch.rand(max(1, size // 4))
                    call = lambda x=x: tcoll_torch.all_reduce(x, group=groups["tcoll"])  # noqa
                else:
                    call = make_call(op, size, P, group)
                # iterations: about args.target_s per repeat, at least 2
                probe = time_calls(call, 2, 1, group)
                t = torch.tensor([probe], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # every rank runs the same count
                iters = int(max(2, min(args.max_iters, args.target_s / max(t.item(), 1e-7))))
                samples = [time_calls(call, iters, 1, group) for _ in range(args.reps)]
                t = torch.tensor(samples, dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's time
                medians[backend] = statistics.median(t.tolist())
            if rank == 0:
                bus = BUS_FACTOR[op](P)
                row = {"op": op, "bytes": size, "ranks": P}
                for b, sec in medians.items():
                    row[b] = {"time_us": sec * 1e6, "algbw_GBps": size / sec / 1e9,
                              "busbw_GBps": size / sec / 1e9 * bus}
                row["speedup"] = medians["gloo"] / medians["tcoll"]
                line = (f"{op:24s} {size:>11d} {medians['tcoll'] * 1e6:11.1f} "
                        f"{row['tcoll']['busbw_GBps']:8.3f} {medians['gloo'] * 1e6:11.1f} "
                        f"{row['gloo']['busbw_GBps']:8.3f} {row['speedup']:8.2f}")
                if "deepspeed" in medians:
                    row["speedup_vs_deepspeed"] = medians["deepspeed"] / medians["tcoll"]
                    row["direct_vs_deepspeed"] = medians["deepspeed"] / medians["tcoll_direct"]
                    line += (f" {medians['deepspeed'] * 1e6:11.1f} "
                             f"{row['deepspeed']['busbw_GBps']:8.3f} "
                             f"{row['speedup_vs_deepspeed']:8.2f} "
                             f"{medians['tcoll_direct'] * 1e6:11.1f} "
                             f"{row['direct_vs_deepspeed']:8.2f}")
                rows.append(row)
                print(line, flush=True)
        size *= args.factor
    dist.destroy_process_group()
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "ranks": P, "reps": args.reps, "rows": rows},
                      f, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-np", type=int, default=2, help="processes")
    parser.add_argument("-b", "--begin", type=parse_size, default=8)
    parser.add_argument("-e", "--end", type=parse_size, default=256 << 20)
    parser.add_argument("-f", "--factor", type=int, default=4)
    parser.add_argument("--ops", type=lambda s: s.split(","), default=OPS)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--target-s", type=float, default=0.1,
                        help="seconds per repeat (iterations are chosen to fill it)")
    parser.add_argument("--max-iters", type=int, default=2000)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--overhead", action="store_true",
                        help="first time an 8 B all_reduce from Python against C++")
    parser.add_argument("--deepspeed", action="store_true",
                        help="also DeepSpeed's shared-memory allreduce (all_reduce rows)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for op in args.ops:
        if op not in OPS:
            parser.error(f"unknown op {op}; choose from {OPS}")
    print(f"# torch {torch.__version__}, {args.np} processes, float32, time per call (us) as "
          f"the Python caller sees it, median of {args.reps}; busbw in GB/s")
    print(f"{'op':24s} {'bytes':>11s} {'tcoll_us':>11s} {'tcoll_bw':>8s} {'gloo_us':>11s} "
          f"{'gloo_bw':>8s} {'speedup':>8s}" +
          (f" {'ds_us':>11s} {'ds_bw':>8s} {'vs_ds':>8s} {'direct_us':>11s} {'dir_vs_ds':>8s}"
           if args.deepspeed else ""),
          flush=True)
    store = tempfile.mktemp(prefix="tcoll-bench-store-")
    mp.start_processes(worker, args=(args.np, args, store), nprocs=args.np, start_method="spawn")


if __name__ == "__main__":
    main()
