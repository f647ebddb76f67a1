"""Iteration time of data-parallel training on real PyTorch models, side by side in one job:
PyTorch's DDP on Gloo, PyTorch's DDP on the tcoll backend, and tcoll_torch's
DistributedDataParallel with each planner (issue 28 section 3; docs/torch.md has the table).

    bash bench/torch/setup_extras.sh   # .venv-extras: torchvision's model definitions
    .venv-extras/bin/python bench/torch/ddp_speed.py --model resnet18 --ranks 2 [--json out.json]
    .venv/bin/python bench/torch/ddp_speed.py --model mlp --planners optimal  # no torchvision

Per variant every rank builds the model from one seed, runs --warmup iterations (tcoll's
autotune measures and re-plans inside them), then --iterations timed iterations of
forward + backward + SGD step on random inputs; the time of an iteration is the slowest
rank's, and the figure the median over the timed iterations. "compute" is the same
iteration with no communication at all (one process alone, no DDP): iteration - compute is
the communication that backward did not hide. "predicted" is the simulator's iteration time
(plan::simulate) for the plan tcoll ran, from the forward time, the backward times (gaps
between gradients, the first from the start of backward) and the cost line it measured,
plus the measured optimizer step (which the simulator does not model).
With --nodes N the ranks play N emulated nodes (host names in UTS namespaces, root only):
tcoll's backend then runs the hierarchy (shared memory inside a node, Gloo's send/recv
between nodes); inside `scripts/emulated_cluster.sh --no-mpi --rate 10gbit -- ...` every
byte between processes over TCP crosses a loopback shaped to that rate (DDP on Gloo's
whole allreduce, tcoll's inter-node level only).
With --internode mpi (and --nodes > 1) the ranks are started by `mpirun` instead (this
script starts it, over TCP only: `--mca btl self,tcp`), so tcoll's backend carries its
messages between nodes over MPI (mpi_transport) instead of Gloo's send/recv; DDP on Gloo
still talks Gloo. Inside `scripts/emulated_cluster.sh --no-mpi --rate R` MPI's TCP crosses
the shaped loopback too.
With --trace-dir, rank 0 writes for every tcoll planner the last measured iteration
(`<model>_<ranks>r_<planner>_measured.json`, WAIT_FOR_DATA / QUEUE / ALLREDUCE per bucket)
and the simulator's timeline of the same plan from the same measurements
(`..._predicted.json`), Chrome traces to open side by side in Perfetto.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "torch"))
from harness import run_ranks  # noqa: E402

PLANNERS = ["layerwise", "single", "threshold", "ddp", "mgwfbp", "adafusion", "optimal"]


def make_model(name):
    import torch
    if name in ("resnet18", "resnet50", "vgg16"):
        import torchvision
        model = getattr(torchvision.models, name)(num_classes=10)
        return model, lambda g: (torch.randn(8, 3, 32, 32, generator=g),
                                 torch.randint(0, 10, (8,), generator=g))
    if name.startswith("bert"):  # BERT-base's encoder shape: d 768, 12 heads, ff 3072
        layers = int(name[4:] or 12)
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
        encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        head = torch.nn.Linear(768, 10)
        model = torch.nn.Sequential(encoder, torch.nn.Flatten(0, 1), head)
        return model, lambda g: (torch.randn(2, 32, 768, generator=g),
                                 torch.randint(0, 10, (64,), generator=g))
    if name == "mlp":  # communication-heavy: 34 M parameters in 8 tensors, little compute
        model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 2048), torch.nn.ReLU(),
                                    torch.nn.Linear(2048, 10))
        return model, lambda g: (torch.randn(8, 2048, generator=g),
                                 torch.randint(0, 10, (8,), generator=g))
    raise ValueError(f"unknown model {name}")


def body(rank, size, model_name, variants, warmup, iterations, trace_dir=None):
    import torch
    import torch.distributed as dist

    import tcoll_torch

    gloo = dist.new_group(backend="gloo")
    results = {}
    for variant in variants:
        torch.manual_seed(1)
        model, inputs = make_model(model_name)
        if variant == "ddp/gloo":
            net = torch.nn.parallel.DistributedDataParallel(model, process_group=gloo)
        elif variant == "ddp/tcoll":
            net = torch.nn.parallel.DistributedDataParallel(model)
        elif variant == "compute":
            net = model
        else:
            net = tcoll_torch.DistributedDataParallel(model, planner=variant.split("/")[1])
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(rank)
        times, forward, step, backward_start = [], [], [], 0.0
        for it in range(warmup + iterations):
            x, y = inputs(g)
            if variant != "compute":
                dist.barrier(group=gloo)
            start = time.perf_counter()
            opt.zero_grad()
            out = net(x)
            mid = time.perf_counter()
            torch.nn.functional.cross_entropy(out, y).backward()
            stepping = time.perf_counter()
            opt.step()
            end = time.perf_counter()
            backward_start = mid  # of the last iteration, for its timeline below
            if it >= warmup:
                times.append(end - start)
                forward.append(mid - start)
                step.append(end - stepping)
        entry = {"times": times, "forward": forward}
        if variant.startswith("tcoll/"):
            timing = net.last_timing()
            ready = timing["tensor_ready_us"]
            # the driver's timeline begins at the previous iteration's end: the first gap
            # starts when this iteration's backward did (after the step, the barrier, the
            # zero_grad and the forward, which the simulator models apart)
            since_begin_us = (backward_start - timing["begin_s"]) * 1e6
            backward = [max(0.0, b - a) for a, b in zip([since_begin_us] + ready[:-1], ready)]
            nbytes = [p.numel() * 4 for p in net.parameters_in_backward_order()]
            cost = net.fitted_cost() or (0.0, 0.0)
            inputs_of_simulator = (net.plan(), nbytes, backward,
                                   statistics.median(forward) * 1e6, cost[0], cost[1])
            # the simulator's iteration is forward + backward + the communication left;
            # the measured one also holds the optimizer step
            entry.update(plan=net.plan(), cost=cost, buckets=len(net.plan()),
                         predicted_us=tcoll_torch._C.predict_iteration_us(*inputs_of_simulator)
                         + statistics.median(step) * 1e6)
            if trace_dir and rank == 0:
                stem = os.path.join(trace_dir,
                                    f"{model_name}_{size}r_{variant.split('/')[1]}")
                net.write_timeline(stem + "_measured.json")
                tcoll_torch._C.write_predicted_trace(stem + "_predicted.json",
                                                     *inputs_of_simulator)
        results[variant] = entry
        del net, model, opt
    return results


def mpi_worker(out_dir, store, hostnames, args):
    """One rank under mpirun (--internode mpi): its host name, the tcoll group through the
    store file, the body; its results go to OUT_DIR/rank<r>.json for the parent."""
    from harness import set_hostname
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    if hostnames and not set_hostname(hostnames[rank]):
        sys.exit("ddp_speed: cannot make a UTS namespace (needs root)")
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import torch
    import torch.distributed as dist

    import tcoll_torch

    torch.set_num_threads(1)
    dist.init_process_group("tcoll", init_method="file://" + store, rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=600))
    results = body(rank, size, *args)
    internode = tcoll_torch._C.internode_of(dist.group.WORLD._get_backend(torch.device("cpu")))
    assert internode == "mpi", f"rank {rank}: tcoll crosses nodes over {internode}, not MPI"
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    # tcoll's exit handler destroys the groups and calls MPI_Finalize


def run_under_mpirun(ranks, hostnames, args):
    """Starts `ranks` workers under mpirun (TCP between them) and returns their results."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        sys.exit("ddp_speed: --internode mpi needs mpirun")
    work = tempfile.mkdtemp(prefix="ddp_speed_mpi_")
    try:
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                   TCOLL_TORCH_INTERNODE="mpi")
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "-np", str(ranks), "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include",
               "lo", "--mca", "oob_tcp_if_include", "lo", sys.executable,
               os.path.abspath(__file__), "--mpi-worker", work,
               json.dumps({"hostnames": hostnames, "args": args})]
        subprocess.run(cmd, env=env, check=True, timeout=7200)
        measured = []
        for r in range(ranks):
            with open(os.path.join(work, f"rank{r}.json")) as f:
                measured.append(json.load(f))
        return measured
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--mpi-worker":
        job = json.loads(sys.argv[3])
        mpi_worker(sys.argv[2], os.path.join(sys.argv[2], "store"), job["hostnames"],
                   job["args"])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--planners", default=",".join(PLANNERS))
    parser.add_argument("--json")
    parser.add_argument("--trace-dir", help="write measured and predicted Chrome traces here")
    parser.add_argument("--nodes", type=int, default=1,
                        help="emulated nodes: rank r gets host name emu-node<r*nodes//ranks> "
                             "in a UTS namespace of its own (root), so tcoll runs its "
                             "hierarchy and crosses nodes over Gloo's TCP; run inside "
                             "scripts/emulated_cluster.sh --no-mpi to shape that link")
    parser.add_argument("--internode", choices=["gloo", "mpi"], default="gloo",
                        help="what carries tcoll's messages between emulated nodes: Gloo's "
                             "send/recv (processes started here) or MPI (started by mpirun)")
    a = parser.parse_args()
    if not 1 <= a.nodes <= a.ranks:
        parser.error("--nodes must be in [1, --ranks]")
    if a.internode == "mpi" and a.nodes < 2:
        parser.error("--internode mpi needs --nodes >= 2")
    hostnames = ([f"emu-node{r * a.nodes // a.ranks}" for r in range(a.ranks)]
                 if a.nodes > 1 else None)
    if a.trace_dir:
        os.makedirs(a.trace_dir, exist_ok=True)
    variants = ["ddp/gloo", "ddp/tcoll"] + [f"tcoll/{p}" for p in a.planners.split(",") if p]
    if a.internode == "mpi":
        measured = run_under_mpirun(a.ranks, hostnames,
                                    [a.model, variants, a.warmup, a.iterations,
                                     a.trace_dir and os.path.abspath(a.trace_dir)])
    else:
        measured = run_ranks(body, a.ranks, a.model, variants, a.warmup, a.iterations,
                             a.trace_dir and os.path.abspath(a.trace_dir), timeout_s=600,
                             deadline=7200, hostnames=hostnames)
    alone = run_ranks(body, 1, a.model, ["compute"], a.warmup, a.iterations, init=True,
                      timeout_s=600, deadline=3600)[0]["compute"]
    compute_ms = statistics.median(alone["times"]) * 1e3
    rows = []
    for v in variants:
        per_iteration = [max(r[v]["times"][i] for r in measured)
                         for i in range(len(measured[0][v]["times"]))]
        ms = statistics.median(per_iteration) * 1e3
        row = {"variant": v, "ms": ms, "spread_ms": (min(per_iteration) * 1e3,
                                                     max(per_iteration) * 1e3),
               "non_overlapped_ms": ms - compute_ms}
        if v.startswith("tcoll/"):
            mine = measured[0][v]
            row.update(buckets=mine["buckets"], predicted_ms=mine["predicted_us"] / 1e3,
                       cost=mine["cost"])
        rows.append(row)
    gloo_ms = rows[0]["ms"]
    ddp_tcoll_ms = rows[1]["ms"]
    between = f", {a.internode} between nodes" if a.nodes > 1 else ""
    print(f"# {a.model}, {a.ranks} ranks on {a.nodes} node(s){between}, median of "
          f"{a.iterations} iterations after {a.warmup} warm-up; compute alone "
          f"{compute_ms:.1f} ms")
    print("| variant | ms/iter (min-max) | non-overlapped ms | buckets | predicted ms (error) "
          "| vs DDP/Gloo | vs DDP/tcoll |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        pred = (f"{row['predicted_ms']:.1f} ({(row['predicted_ms'] - row['ms']) / row['ms']:+.0%})"
                if "predicted_ms" in row else "-")
        print(f"| {row['variant']} | {row['ms']:.1f} ({row['spread_ms'][0]:.1f}-"
              f"{row['spread_ms'][1]:.1f}) | {row['non_overlapped_ms']:.1f} | "
              f"{row.get('buckets', '-')} | {pred} | {gloo_ms / row['ms']:.2f}x | "
              f"{ddp_tcoll_ms / row['ms']:.2f}x |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "ranks": a.ranks, "nodes": a.nodes,
                       "internode": a.internode if a.nodes > 1 else None,
                       "compute_ms": compute_ms,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
