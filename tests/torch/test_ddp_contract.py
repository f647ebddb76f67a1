"""tcoll_torch.DistributedDataParallel keeps PyTorch's DDP contract (issue 50): every rank's
replica and every `.grad` (its value, or None) as PyTorch's own DDP on Gloo leaves them, for
parameters unused on some ranks, `no_sync()` accumulation, parameters that never get a
gradient, `static_graph`, buffers, a `state_dict` round trip, float64, bfloat16 and
mixed-dtype models, and every argument PyTorch's DDP takes.

Each body trains one model twice from the same start: through tcoll's DDP on the "tcoll"
default group and through torch.nn.parallel.DistributedDataParallel on a Gloo group, with
the same data and steps (SGD with weight decay, so a `.grad` that should have stayed None
moves a parameter). Integer-valued data on 2 ranks: every gradient and average is exact, so
the two must agree bit for bit; fractional data on 3 ranks: bitwise identical on every rank
and within the reassociation bound of Gloo's.
"""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_ranks  # noqa: E402


class Branchy(torch.nn.Module):
    """A trunk and two heads; `forward(x, use)` runs the heads `use` names ("left", "right"
    or "both"). `never` is a layer forward never calls. `right_dtype` makes the right head
    another dtype than the rest (a mixed-dtype model)."""

    def __init__(self, dtype=torch.float32, right_dtype=None):
        super().__init__()
        self.trunk = torch.nn.Linear(6, 5).to(dtype)
        self.left = torch.nn.Linear(5, 3).to(dtype)
        self.right = torch.nn.Linear(5, 3).to(right_dtype or dtype)
        self.never = torch.nn.Linear(2, 2).to(dtype)
        self.dtype = dtype

    def forward(self, x, use="both"):
        h = torch.relu(self.trunk(x))
        out = torch.zeros(x.shape[0], 3, dtype=self.dtype)
        if use in ("left", "both"):
            out = out + self.left(h)
        if use in ("right", "both"):
            out = out + self.right(h.to(self.right.weight.dtype)).to(self.dtype)
        return out


def integer_init(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-1, 2, p.shape, generator=g).to(p.dtype))


def data(step, rank, integer, dtype):
    g = torch.Generator().manual_seed(1000 * step + rank)
    if integer:
        return torch.randint(-1, 2, (4, 6), generator=g).to(dtype)
    return (torch.rand((4, 6), generator=g) - 0.5).to(dtype)


def loss_of(out, integer):
    return out.float().sum() if integer else (out.float() ** 2).mean()


def snapshot(model):
    """Parameters and gradients (None stays None), detached copies."""
    return {name: (p.detach().clone(), None if p.grad is None else p.grad.detach().clone())
            for name, p in model.named_parameters()}


# which heads each rank uses in each step (rank -> use): used on some ranks only, on every
# rank, and on no rank (the right head in step 2, the left in step 3)
PATTERN = [
    {0: "left", 1: "right", 2: "both"},
    {0: "both", 1: "left", 2: "left"},
    {0: "left", 1: "left", 2: "left"},
    {0: "right", 1: "right", 2: "right"},
]


def body_train(rank, size, case):
    import torch.distributed as dist

    import tcoll_torch

    integer = case.get("integer", True)
    dtype = case.get("dtype", torch.float32)
    gloo = dist.new_group(backend="gloo")
    nets = []
    for _ in range(2):
        torch.manual_seed(5 + rank)  # different on every rank: DDP broadcasts rank 0's
        net = Branchy(dtype, case.get("right_dtype"))
        if integer:
            integer_init(net, 7 + rank)
        nets.append(net)
    options = case.get("options", {})
    ours = tcoll_torch.DistributedDataParallel(nets[0], **options, **case.get("ours", {}))
    theirs = torch.nn.parallel.DistributedDataParallel(nets[1], process_group=gloo, **options)
    history = {"ours": [], "theirs": []}
    lr, wd = (0.5, 0.5) if integer else (0.1, 0.1)
    for name, ddp, net in (("ours", ours, nets[0]), ("theirs", theirs, nets[1])):
        opt = torch.optim.SGD(net.parameters(), lr=lr, weight_decay=wd)
        for step in range(case.get("steps", 4)):
            opt.zero_grad(set_to_none=case.get("set_to_none", True))
            for micro, use in enumerate(case.get("no_sync", [])):
                with ddp.no_sync():  # accumulates locally, unreduced
                    x = data(100 + 10 * step + micro, rank, integer, dtype)
                    loss_of(ddp(x, use), integer).backward()
            use = case.get("use") or PATTERN[step % len(PATTERN)][rank]
            loss_of(ddp(data(step, rank, integer, dtype), use), integer).backward()
            history[name].append(snapshot(net))
            opt.step()
        history[name].append(snapshot(net))
    return history


def run_case(case, size=2):
    results = run_ranks(body_train, size, case, deadline=120)
    integer = case.get("integer", True)
    for r, history in enumerate(results):
        for step, (ours, theirs) in enumerate(zip(history["ours"], history["theirs"])):
            for name, (p, g) in ours.items():
                p_ref, g_ref = theirs[name]
                where = f"rank {r}, step {step}, {name}"
                # identical on every rank
                p0, g0 = results[0]["ours"][step][name]
                assert torch.equal(p, p0), f"{where}: parameter differs from rank 0's"
                assert (g is None) == (g0 is None), f"{where}: .grad None on some ranks only"
                if g is not None:
                    assert torch.equal(g, g0), f"{where}: .grad differs from rank 0's"
                # as PyTorch's DDP
                assert (g is None) == (g_ref is None), \
                    f"{where}: .grad is {'None' if g is None else 'set'}, PyTorch's DDP: " \
                    f"{'None' if g_ref is None else 'set'}"
                assert p.dtype == p_ref.dtype, where
                if integer:
                    assert torch.equal(p, p_ref), f"{where}: parameter {p} vs DDP's {p_ref}"
                    if g is not None:
                        assert torch.equal(g, g_ref), f"{where}: .grad {g} vs DDP's {g_ref}"
                else:
                    tol = dict(rtol=1e-5, atol=1e-6) if p.dtype != torch.bfloat16 \
                        else dict(rtol=2e-2, atol=2e-2)
                    assert torch.allclose(p, p_ref, **tol), f"{where}: {p} vs DDP's {p_ref}"
    return results


@pytest.mark.parametrize("set_to_none", [True, False])
def test_parameters_unused_on_some_ranks(set_to_none):
    run_case({"options": {"find_unused_parameters": True}, "set_to_none": set_to_none})


def test_parameters_unused_on_some_ranks_fractional_three_ranks():
    run_case({"options": {"find_unused_parameters": True}, "integer": False}, size=3)


def test_no_sync_accumulation_of_parameters_used_inside_or_outside_only():
    # inside the no_sync micro-batches only the right head, in the synchronizing one only
    # the left; then the other way round
    run_case({"options": {"find_unused_parameters": True}, "no_sync": ["right", "right"],
              "use": "left", "steps": 2})
    run_case({"options": {"find_unused_parameters": True}, "no_sync": ["left"],
              "use": "both", "steps": 2, "set_to_none": False})


def test_parameters_that_never_get_a_gradient_stay_untouched():
    # every rank uses both heads; `never` keeps .grad None and weight decay leaves it alone
    results = run_case({"options": {"find_unused_parameters": True}, "use": "both"})
    first, last = results[0]["ours"][0], results[0]["ours"][-1]
    assert last["never.weight"][1] is None
    assert torch.equal(first["never.weight"][0], last["never.weight"][0])


def test_static_graph():
    run_case({"options": {"static_graph": True}, "use": "left"})


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_whole_model_of_another_dtype(dtype):
    run_case({"dtype": dtype, "use": "both", "options": {"find_unused_parameters": True}})


def test_mixed_dtype_model():
    run_case({"right_dtype": torch.float64, "options": {"find_unused_parameters": True}})
    run_case({"right_dtype": torch.float64, "integer": False, "use": "both",
              "options": {"find_unused_parameters": True}}, size=3)


def test_every_argument_of_pytorchs_ddp_is_accepted():
    options = {"device_ids": None, "output_device": None, "dim": 0, "init_sync": True,
               "bucket_cap_mb": 1, "find_unused_parameters": True, "check_reduction": False,
               "gradient_as_bucket_view": True, "skip_all_reduce_unused_params": False,
               "forward_sync_buffers": True}
    run_case({"options": options, "steps": 2})


def body_buffers_and_state_dict(rank, size):
    import torch.distributed as dist

    import tcoll_torch

    gloo = dist.new_group(backend="gloo")

    def make():
        torch.manual_seed(3 + rank)
        net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6),
                                  torch.nn.Linear(6, 2))
        with torch.no_grad():  # buffers that differ between ranks
            net[1].running_mean.fill_(rank + 0.5)
        return net

    ours = tcoll_torch.DistributedDataParallel(make())
    theirs = torch.nn.parallel.DistributedDataParallel(make(), process_group=gloo)
    out = {}
    for name, ddp in (("ours", ours), ("theirs", theirs)):
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for step in range(3):
            opt.zero_grad()
            x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step * 10 + rank))
            ddp(x).pow(2).mean().backward()
            opt.step()
        out[name] = {k: v.clone() for k, v in ddp.state_dict().items()}
    # a round trip: a new tcoll DDP loads the state and trains on exactly as the old one
    restored = tcoll_torch.DistributedDataParallel(make())
    restored.load_state_dict(out["ours"])
    for ddp in (ours, restored):
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        opt.zero_grad()
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(99 + rank))
        ddp(x).pow(2).mean().backward()
        opt.step()
    out["continued"] = {k: v.clone() for k, v in ours.state_dict().items()}
    out["restored"] = {k: v.clone() for k, v in restored.state_dict().items()}
    return out


def test_buffers_broadcast_from_rank_0_and_state_dict_round_trip():
    results = run_ranks(body_buffers_and_state_dict, 2, deadline=120)
    for r, out in enumerate(results):
        assert list(out["ours"]) == list(out["theirs"]), "state_dict keys as PyTorch's DDP"
        for k, v in out["ours"].items():
            # the parameters agree on every rank; the buffers differ by the last forward's
            # local batch statistics, in PyTorch's DDP too (its next forward broadcasts them)
            if "running" not in k and "batches" not in k:
                assert torch.equal(v, results[0]["ours"][k]), f"rank {r}: {k} differs from rank 0"
            assert torch.allclose(v.float(), out["theirs"][k].float(), rtol=1e-5, atol=1e-6), k
        for k, v in out["continued"].items():
            assert torch.equal(v, out["restored"][k]), f"rank {r}: {k} after the round trip"


def body_device_ids(rank, size):
    import tcoll_torch

    tcoll_torch.DistributedDataParallel(torch.nn.Linear(2, 2), device_ids=[0])


def test_device_ids_on_a_cpu_model_is_pytorchs_error():
    _, errors = run_ranks(body_device_ids, 1, allow_errors=True)
    assert "ValueError" in errors[0] and "device_ids" in errors[0], errors[0]


class Wide(torch.nn.Module):
    """Layers of 64-256 K elements (buckets far above the 64 KiB the backend runs in the
    caller's thread); `head_b` is used on rank 0 only."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(256, 512)
        self.b = torch.nn.Linear(512, 256)
        self.head_a = torch.nn.Linear(256, 64)
        self.head_b = torch.nn.Linear(256, 64)

    def forward(self, x, rank=0):
        h = torch.relu(self.b(torch.relu(self.a(x))))
        out = self.head_a(h)
        return out + self.head_b(h) if rank == 0 else out


def body_hooks_in_order(rank, size, kind, options):
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    from tcoll_torch import hooks

    torch.manual_seed(0)
    net = Wide()
    ddp = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.6, **options)
    if kind == "topk":
        ddp.register_comm_hook(hooks.TopkState(density=0.05), hooks.topk_hook)
    elif kind == "csc":
        ddp.register_comm_hook(hooks.CscState(density=0.3, chunk_elements=4096,
                                              warmup_iterations=1), hooks.csc_hook)
    else:  # PowerSGD: collectives started and waited for inside `then` callbacks
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                            start_powerSGD_iter=2, use_error_feedback=True)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for step in range(4):
        opt.zero_grad()
        x = torch.randn(16, 256, generator=torch.Generator().manual_seed(10 * step + rank))
        ddp(x, rank).pow(2).mean().backward()
        opt.step()
    dist.barrier()
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.parametrize("kind", ["topk", "csc", "powersgd"])
@pytest.mark.parametrize("options", [{"find_unused_parameters": True}, {"static_graph": True}],
                         ids=["find_unused", "static_graph"])
def test_hooks_keep_the_call_order_with_ddps_own_collectives(kind, options):
    results = run_ranks(body_hooks_in_order, 2, kind, options, timeout_s=10, deadline=90)
    for r, params in enumerate(results):
        for i, (a, b) in enumerate(zip(params, results[0])):
            assert torch.equal(a, b), f"{kind}: rank {r} parameter {i} differs from rank 0's"
