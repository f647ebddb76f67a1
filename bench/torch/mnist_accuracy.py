"""Held-out accuracy of a small convolutional network on the fetched MNIST file, trained
data-parallel through tcoll_torch.DistributedDataParallel (dense, CSC at 85 % and 99 %
sparsity with and without the momentum correction, top-k with error feedback and DGC at
99 %), through PyTorch's DDP on Gloo, and
through PyTorch's DDP on tcoll with tcoll's comm hooks (CSC, top-k, DGC), against epochs and
against bytes sent (issue 28 section 3; docs/torch.md shows the plot).

    bash scripts/fetch_mnist.sh
    .venv/bin/python bench/torch/mnist_accuracy.py --ranks 2 --epochs 6 \
        --json docs/results/torch_2026-11-28/mnist_accuracy_np2.json --plot docs/img/torch_mnist_accuracy.png

The 5,000 samples are shuffled once (seed 0): 4,000 for training (rank r takes every P-th),
1,000 held out. Every run starts from the same initial parameters (seed 1) and sees the same
batches; SGD with momentum 0.9, except DGC, whose momentum is inside the gradient it
returns (plain SGD), and the "momentum correction" runs (tcoll_torch.CscMomentumSGD,
momentum 0.9, with the momentum-scaled residual: GradientFlow's Algorithm 1). Bytes are what this rank sent per iteration: for dense, the ring's
2 (P-1)/P of the gradient bytes; for the sparse schemes, the adaptors' own counts (CSC:
important chunks and norm vector; top-k and DGC: the allgathered (index, value) pairs).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "torch"))
from harness import run_ranks  # noqa: E402

CSC = {"chunk_elements": 256, "warmup_iterations": 40}
RUNS = {  # tcoll DDP options, or a hook on PyTorch's DDP over the tcoll group
    "PyTorch DDP on Gloo": {},
    "tcoll DDP dense": {"scheme": "dense"},
    "tcoll DDP CSC 85%": {"scheme": "csc", "density": 0.15, **CSC},
    "tcoll DDP CSC 99%": {"scheme": "csc", "density": 0.01, **CSC},
    # GradientFlow's Algorithm 1 whole: the momentum-scaled residual and the optimizer's
    # momentum correction (tcoll_torch.CscMomentumSGD)
    "tcoll DDP CSC 85% + momentum correction": {
        "scheme": "csc", "density": 0.15, "residual": "momentum_scaled",
        "optimizer": "csc_momentum", **CSC},
    "tcoll DDP CSC 99% + momentum correction": {
        "scheme": "csc", "density": 0.01, "residual": "momentum_scaled",
        "optimizer": "csc_momentum", **CSC},
    "tcoll DDP top-k 99%": {"scheme": "topk", "density": 0.01},
    "tcoll DDP DGC 99%": {"scheme": "dgc", "density": 0.01},
    "PyTorch DDP + csc_hook 85%": {"hook": "csc", "density": 0.15, **CSC},
    "PyTorch DDP + topk_hook 99%": {"hook": "topk", "density": 0.01},
    "PyTorch DDP + dgc_hook 99%": {"hook": "dgc", "density": 0.01},
}


def body(rank, size, runs, epochs, data_path):
    import numpy as np
    import torch
    import torch.distributed as dist

    import tcoll_torch
    from tcoll_torch import hooks

    data = np.loadtxt(data_path, delimiter=",", dtype=np.float32)
    order = np.random.default_rng(0).permutation(len(data))
    train, test = data[order[:4000]], data[order[4000:]]
    shard = torch.from_numpy(train[rank::size])
    x, y = shard[:, :784].view(-1, 1, 28, 28) / 255, shard[:, 784].long()
    tx = torch.from_numpy(test[:, :784]).view(-1, 1, 28, 28) / 255
    ty = test[:, 784]
    gloo = dist.new_group(backend="gloo")
    out = {}
    for name in runs:
        options = RUNS[name]
        torch.manual_seed(1)
        net = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                  torch.nn.Flatten(), torch.nn.Linear(8 * 12 * 12, 10))
        grad_bytes = sum(p.numel() * 4 for p in net.parameters())
        options = dict(options)
        hook, state = options.pop("hook", None), None
        optimizer = options.pop("optimizer", "sgd")
        if hook:
            model = torch.nn.parallel.DistributedDataParallel(net)  # the tcoll group
            state = {"csc": hooks.CscState, "topk": hooks.TopkState,
                     "dgc": hooks.DgcState}[hook](**options)
            model.register_comm_hook(state, getattr(hooks, hook + "_hook"))
        elif options:
            model = tcoll_torch.DistributedDataParallel(net, **options)
        else:
            model = torch.nn.parallel.DistributedDataParallel(net, process_group=gloo)
        dgc = "dgc" in (hook, options.get("scheme"))
        if optimizer == "csc_momentum":
            opt = tcoll_torch.CscMomentumSGD(model, lr=0.05, momentum=0.9)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.0 if dgc else 0.9)
        sent, curve = 0, []
        for epoch in range(epochs):
            for i in range(0, len(x), 32):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32]).backward()
                opt.step()
                if state is not None:
                    sent += sum(r[0].stats()["bytes_sent"] for r in state.reducers.values())
                elif options.get("scheme", "dense") != "dense":
                    sent += model.stats()["bytes_sent"]
                else:
                    sent += 2 * (size - 1) * grad_bytes // size
            with torch.no_grad():
                accuracy = float((net(tx).argmax(1).numpy() == ty).mean())
            curve.append({"epoch": epoch + 1, "accuracy": accuracy, "bytes": sent})
        out[name] = curve
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--data", default=os.path.join(ROOT, "data", "mnist", "mnist_5k.csv.gz"))
    parser.add_argument("--json")
    parser.add_argument("--plot")
    a = parser.parse_args()
    results = run_ranks(body, a.ranks, list(RUNS), a.epochs, os.path.abspath(a.data),
                        timeout_s=300, deadline=3600)[0]
    print(f"# held-out accuracy, {a.ranks} ranks, batch 32 per rank")
    print("| run | " + " | ".join(f"epoch {e + 1}" for e in range(a.epochs)) +
          " | MB sent per rank |")
    print("|---|" + "---|" * (a.epochs + 1))
    for name, curve in results.items():
        print(f"| {name} | " + " | ".join(f"{c['accuracy']:.3f}" for c in curve) +
              f" | {curve[-1]['bytes'] / 1e6:.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ranks": a.ranks, "runs": results}, f, indent=1)
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (by_epoch, by_bytes) = plt.subplots(1, 2, figsize=(11, 5.5))
        colors = plt.get_cmap("tab20").colors  # one colour per run (more than 10 runs)
        for k, (name, curve) in enumerate(results.items()):
            acc = [c["accuracy"] for c in curve]
            style = {"marker": "o", "label": name, "color": colors[(2 * k) % 20 + (k >= 10)]}
            by_epoch.plot([c["epoch"] for c in curve], acc, **style)
            by_bytes.plot([c["bytes"] / 1e6 for c in curve], acc, **style)
        by_epoch.set_xlabel("epoch")
        by_bytes.set_xlabel("MB sent by one rank")
        by_bytes.set_xscale("log")
        for ax in (by_epoch, by_bytes):
            ax.set_ylabel("held-out accuracy")
            ax.grid(True, alpha=0.3)
        handles, labels = by_epoch.get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=3, fontsize="small")
        fig.suptitle(f"MNIST (5k file), {a.ranks} ranks: tcoll_torch.DistributedDataParallel")
        fig.tight_layout(rect=(0, 0.2, 1, 1))
        fig.savefig(a.plot, dpi=100)


if __name__ == "__main__":
    main()
