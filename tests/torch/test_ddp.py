"""tcoll_torch.DistributedDataParallel against PyTorch's own DDP on Gloo (issue 28).

Every rank trains the same random model twice from rank 0's initial parameters: once through
tcoll's DDP on the "tcoll" backend, once through torch.nn.parallel.DistributedDataParallel on
a Gloo group, with the same data and the same SGD steps. With integer-valued data on 1, 2 or
4 ranks every gradient and its average are exact in float, so the parameters must match
bit for bit; with fractional data they must be bitwise identical on every rank and within
the reassociation bound of Gloo's.
"""
import os
import random
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_ranks  # noqa: E402


class RandomNet(torch.nn.Module):
    """Linear layers of random widths with ReLU; `unused` is a layer forward never calls
    (a parameter that gets no gradient)."""

    def __init__(self, widths, unused, bias=True):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(a, b, bias=bias and i % 2 == 0)
            for i, (a, b) in enumerate(zip(widths, widths[1:])))
        self.unused = torch.nn.Linear(3, 2) if unused else None

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        return x


def make_model(seed, rank, integer, allow_unused=True):
    """A random model from `seed` (its shape the same on every rank), its initial values
    differing between ranks (DDP must broadcast rank 0's)."""
    shape = random.Random(seed)
    widths = [shape.randint(1, 24) for _ in range(shape.randint(2, 5))]
    unused = shape.random() < 0.5 and allow_unused
    torch.manual_seed(seed * 100 + rank)
    model = RandomNet(widths, unused)
    if integer:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randint(-1, 2, p.shape).float())
    return model, widths, unused


def batch(seed, step, rank, width, integer):
    g = torch.Generator().manual_seed(seed * 1000 + step * 10 + rank)
    if integer:
        return torch.randint(-1, 2, (4, width), generator=g).float()
    return torch.rand((4, width), generator=g) - 0.5


def loss_of(out, integer):
    # integer runs: linear in the output, so every gradient is a small integer
    return out.sum() if integer else (out ** 2).mean()


def body_compare(rank, size, seeds, planners, integer, steps, options):
    import torch.distributed as dist

    import tcoll_torch

    gloo = dist.new_group(backend="gloo")
    out = []
    for seed in seeds:
        for planner in planners:
            model, widths, unused = make_model(seed, rank, integer)
            reference = RandomNet(widths, unused)
            ours = tcoll_torch.DistributedDataParallel(
                model, planner=planner, find_unused_parameters=unused, autotune_iterations=2,
                **options)
            reference.load_state_dict(model.state_dict())  # rank 0's, after the broadcast
            theirs = torch.nn.parallel.DistributedDataParallel(
                reference, process_group=gloo, find_unused_parameters=unused)
            lr = 0.5 if integer else 0.1
            opt_ours = torch.optim.SGD(model.parameters(), lr=lr)
            opt_theirs = torch.optim.SGD(reference.parameters(), lr=lr)
            for step in range(steps):
                x = batch(seed, step, rank, widths[0], integer)
                for net, opt in ((ours, opt_ours), (theirs, opt_theirs)):
                    opt.zero_grad(set_to_none=(step % 2 == 0))
                    loss_of(net(x), integer).backward()
                    opt.step()
            out.append({
                "seed": seed, "planner": planner, "plan": ours.plan(),
                "autotuned": ours.autotuned(),
                "ours": [p.detach().clone() for p in model.parameters()],
                "theirs": [p.detach().clone() for p in reference.parameters()],
            })
    return out


def same_bits(a, b):
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


PLANNERS = ["optimal", "layerwise", "single", "ddp", "mgwfbp", "adafusion", "threshold"]


@pytest.mark.parametrize("size", [1, 2, 4])
def test_integer_data_matches_pytorch_ddp_on_gloo_exactly(size):
    seeds = [1, 2, 3] if size > 1 else [4]
    results = run_ranks(body_compare, size, seeds, PLANNERS, True, 4, {}, deadline=300)
    for r in range(size):
        for k, case in enumerate(results[r]):
            label = f"rank {r} seed {case['seed']} planner {case['planner']}"
            assert case["autotuned"], label
            for i, (a, b) in enumerate(zip(case["ours"], case["theirs"])):
                assert same_bits(a, b), f"{label}: parameter {i} differs from DDP on Gloo"
            assert case["plan"] == results[0][k]["plan"], label


def test_fractional_data_bitwise_identical_on_every_rank():
    size = 3
    results = run_ranks(body_compare, size, [5, 6], ["optimal", "layerwise"], False, 4, {},
                        deadline=300)
    for r in range(size):
        for k, case in enumerate(results[r]):
            label = f"rank {r} seed {case['seed']} planner {case['planner']}"
            for i, (a, b) in enumerate(zip(case["ours"], case["theirs"])):
                assert same_bits(a, results[0][k]["ours"][i]), f"{label}: parameter {i}"
                assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"{label}: parameter {i}"


def test_csc_at_full_density_equals_dense_and_bfloat16_wire_is_within_its_bound():
    size = 2
    # csc at density 1 sends every chunk: the same averages as DDP on integer data
    csc = run_ranks(body_compare, size, [7], ["optimal"], True, 3,
                    {"scheme": "csc", "density": 1.0, "chunk_elements": 16}, deadline=200)
    for r in range(size):
        for a, b in zip(csc[r][0]["ours"], csc[r][0]["theirs"]):
            assert same_bits(a, b)
    # bfloat16 on the wire (8 significant bits): one step, identical on every rank, within
    # bfloat16's rounding of the gradient of DDP's float32 step
    wire = run_ranks(body_compare, size, [7, 8], ["optimal"], True, 1, {"wire": "bfloat16"},
                     deadline=200)
    for r in range(size):
        for k, case in enumerate(wire[r]):
            for i, (a, b) in enumerate(zip(case["ours"], case["theirs"])):
                assert same_bits(a, wire[0][k]["ours"][i])
                assert torch.allclose(a, b, rtol=2 ** -7, atol=2 ** -7), f"parameter {i}"


@pytest.mark.parametrize("size", [2, 4])
def test_topk_and_dgc_at_full_density_equal_dense(size):
    # every element sent: top-k without a residual, and DGC at momentum 0 (u = g, v = u, all
    # masked each step), give DDP's averages on integer data, at 2 and 4 ranks
    for options in ({"scheme": "topk", "density": 1.0, "residual": "none"},
                    {"scheme": "dgc", "density": 1.0, "momentum": 0.0}):
        results = run_ranks(body_compare, size, [1], ["optimal"], True, 3, options,
                            deadline=200)
        for r in range(size):
            for i, (a, b) in enumerate(zip(results[r][0]["ours"], results[r][0]["theirs"])):
                assert same_bits(a, b), f"{options['scheme']}: rank {r} parameter {i}"


def body_csc_momentum(rank, size, steps):
    import copy

    import tcoll_torch

    out = {"steps": []}
    torch.manual_seed(31 + rank)  # different on every rank: DDP broadcasts rank 0's
    widths = [17, 23, 9, 6]
    model = RandomNet(widths, False)
    dense = tcoll_torch.DistributedDataParallel(RandomNet(widths, False))
    try:
        tcoll_torch.CscMomentumSGD(dense, lr=0.1)
    except ValueError as e:
        out["refused"] = str(e)
    ddp = tcoll_torch.DistributedDataParallel(
        model, scheme="csc", density=0.4, chunk_elements=8, warmup_iterations=1,
        residual="momentum_scaled", momentum=0.9)
    opt = tcoll_torch.CscMomentumSGD(ddp, lr=0.05)
    params = ddp.parameters_in_backward_order()

    def flat(tensors):
        return [t.detach().clone().reshape(-1) for t in tensors]

    for step in range(steps):
        if step == steps // 2:
            # the model re-lays its pool (as rebuild_order does): the optimizer follows it,
            # each parameter's momentum moving along
            ddp._make_pool(list(reversed(ddp.parameters_in_backward_order())))
            params = ddp.parameters_in_backward_order()
        opt.zero_grad()
        loss_of(ddp(batch(5, step, rank, widths[0], False)), False).backward()
        before = {"w": flat(params), "u": flat(opt.state[p]["momentum_buffer"] for p in params),
                  "g": flat(p.grad for p in params), "important": ddp._reducer.last_important(),
                  "offsets": ddp._reducer.pool_layout()[1]}
        opt.step()
        before["w_after"] = flat(params)
        before["u_after"] = flat(opt.state[p]["momentum_buffer"] for p in params)
        out["steps"].append(before)
    # a state_dict round trip lands in the buffer the step reads
    saved = copy.deepcopy(opt.state_dict())
    loss_of(ddp(batch(5, steps, rank, widths[0], False)), False).backward()
    opt.step()
    opt.load_state_dict(saved)
    # state_dict numbers the parameters in the group's order
    momentum = [opt.state[p]["momentum_buffer"] for p in opt.param_groups[0]["params"]]
    out["reloaded"] = all(torch.equal(m, saved["state"][i]["momentum_buffer"])
                          for i, m in enumerate(momentum))
    base, end = opt._history.data_ptr(), opt._history.data_ptr() + 4 * opt._history.numel()
    out["views"] = all(base <= m.data_ptr() < end for m in momentum)
    out["final"] = flat(model.parameters())
    return out


def test_csc_momentum_correction_optimizer():
    # GradientFlow's Algorithm 1 lines 12-17, checked element by element against the rule:
    # a reduced chunk gets u = 0.9 u + lr g, w = w - u; a chunk kept back keeps w and u
    size, steps, lr, chunk = 2, 6, 0.05, 8
    results = run_ranks(body_csc_momentum, size, steps, deadline=200)
    sent = kept = 0
    for r in range(size):
        res = results[r]
        assert "scheme='csc'" in res["refused"] and "scheme='dense'" in res["refused"]
        for k, st in enumerate(res["steps"]):
            for i, at in enumerate(st["offsets"]):
                n = st["w"][i].numel()
                chunk_of = (at + torch.arange(n)) // chunk
                mask = torch.tensor(st["important"], dtype=torch.bool)[chunk_of]
                u = 0.9 * st["u"][i] + lr * st["g"][i]
                what = f"rank {r} step {k} parameter {i}"
                assert torch.allclose(st["u_after"][i][mask], u[mask], rtol=1e-6, atol=1e-8), what
                assert torch.allclose(st["w_after"][i][mask], (st["w"][i] - u)[mask],
                                      rtol=1e-6, atol=1e-7), what
                # kept back: exactly unchanged, the gradient there zero
                assert torch.equal(st["w_after"][i][~mask], st["w"][i][~mask]), what
                assert torch.equal(st["u_after"][i][~mask], st["u"][i][~mask]), what
                assert not st["g"][i][~mask].any(), what
                sent += int(mask.sum())
                kept += int((~mask).sum())
        assert res["reloaded"], "state_dict round trip: the loaded momentum"
        assert res["views"], "state_dict round trip: the momentum is the step's buffer"
        for a, b in zip(res["final"], results[0]["final"]):
            assert same_bits(a, b), f"rank {r} differs from rank 0"
    assert sent and kept, (sent, kept)  # both rules ran


def body_no_sync(rank, size):
    import torch.distributed as dist

    import tcoll_torch

    gloo = dist.new_group(backend="gloo")
    model, widths, _ = make_model(11, rank, True, allow_unused=False)
    reference = RandomNet(widths, False)
    ours = tcoll_torch.DistributedDataParallel(model, planner="layerwise")
    reference.load_state_dict(model.state_dict(), strict=False)
    theirs = torch.nn.parallel.DistributedDataParallel(reference, process_group=gloo)
    for net in (ours, theirs):
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        for step in range(2):
            opt.zero_grad()
            with net.no_sync():  # two micro-batches accumulate locally
                for micro in range(2):
                    loss_of(net(batch(11, step * 3 + micro, rank, widths[0], True)), True).backward()
            loss_of(net(batch(11, step * 3 + 2, rank, widths[0], True)), True).backward()
            opt.step()
    return [p.detach().clone() for p in model.parameters()], \
        [p.detach().clone() for p in reference.parameters()], \
        list(ours.state_dict().keys()), list(theirs.state_dict().keys())


def test_no_sync_and_state_dict_as_pytorch_ddp():
    results = run_ranks(body_no_sync, 2)
    for ours, theirs, our_keys, their_keys in results:
        assert our_keys == their_keys
        for a, b in zip(ours, theirs):
            assert same_bits(a, b)


def body_hooks(rank, size, steps):
    import torch.distributed as dist

    import tcoll_torch
    from tcoll_torch import hooks

    gloo = dist.new_group(backend="gloo")
    out = {}
    # the CSC hook on PyTorch's DDP (one bucket) against tcoll's DDP with scheme "csc": the
    # same adaptor on the same layout, reached through two different reducers. PyTorch's
    # DDP lays its bucket out in registration order for the first iteration, then in the
    # order the gradients arrived (the reverse, tcoll's order, for this bias-free chain);
    # the hook starts a new adaptor for the new layout. So both sides run step 0 densely
    # (the hook's first adaptor; plain DDP on Gloo for tcoll's side) and CSC from step 1.
    options = {"density": 0.4, "chunk_elements": 8, "warmup_iterations": 1}
    torch.manual_seed(21)
    widths = [14, 23, 9, 5]
    first = RandomNet(widths, False, bias=False)
    reference = RandomNet(widths, False, bias=False)
    reference.load_state_dict(first.state_dict())
    theirs = torch.nn.parallel.DistributedDataParallel(reference, bucket_cap_mb=100)
    theirs.register_comm_hook(hooks.CscState(**options), hooks.csc_hook)
    dense = torch.nn.parallel.DistributedDataParallel(first, process_group=gloo)
    model = RandomNet(widths, False, bias=False)
    for step in range(steps):
        if step == 1:
            model.load_state_dict(first.state_dict())
            ours = tcoll_torch.DistributedDataParallel(model, scheme="csc", **options)
        for net, m in ((dense if step == 0 else ours, first if step == 0 else model),
                       (theirs, reference)):
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            opt.zero_grad()
            loss_of(net(batch(21, step, rank, widths[0], False)), False).backward()
            opt.step()
    out["csc"] = ([p.detach().clone() for p in model.parameters()],
                  [p.detach().clone() for p in reference.parameters()], ours.stats()["density"])
    # bfloat16 hooks on DDP over tcoll and Gloo against plain DDP on Gloo (integer data, small
    # enough to be exact in bfloat16)
    widths = [6, 5, 3]
    runs = {}
    for name, group, hook in (("plain", gloo, None), ("tcoll", None, hooks.bf16_hook),
                              ("gloo", gloo, hooks.bf16_hook)):
        torch.manual_seed(22)
        m = RandomNet(widths, False)
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.randint(-1, 2, p.shape).float())
        net = torch.nn.parallel.DistributedDataParallel(m, process_group=group)
        if hook:
            net.register_comm_hook(group, hook)
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        for step in range(2):
            opt.zero_grad()
            loss_of(net(batch(22, step, rank, widths[0], True)), True).backward()
            opt.step()
        runs[name] = [p.detach().clone() for p in m.parameters()]
    out["bf16"] = runs
    return out


def body_sparse_hooks(rank, size, steps):
    import torch.distributed as dist  # noqa: F401

    import tcoll_torch
    from tcoll_torch import hooks

    # topk_hook / dgc_hook on PyTorch's DDP (one bucket) against tcoll's DDP with scheme
    # "topk" / "dgc": the same C++ adaptor over the same elements. DDP lays its bucket out in
    # registration order for the first iteration and re-lays it in arrival order after; the
    # hook carries each parameter's residual (velocity, accumulation) to the new layout, so
    # both sides keep their state through every step. The selection does not depend on the
    # layout (ties aside, which fractional data does not produce).
    out = {}
    widths = [14, 23, 9, 5]
    # topk_scaled: the momentum-scaled residual (the registry's knobs, the same on both
    # sides). Not a warm-up: the hook's adaptor for DDP's re-laid bucket starts it afresh
    # (docs/torch.md), the scheme's does not.
    scaled = {"density": 0.3, "residual": "momentum_scaled", "momentum": 0.5}
    for name, state, hook, options in (
            ("topk", hooks.TopkState(density=0.3), hooks.topk_hook, {"density": 0.3}),
            ("dgc", hooks.DgcState(density=0.3, momentum=0.5), hooks.dgc_hook,
             {"density": 0.3, "momentum": 0.5}),
            ("topk_scaled", hooks.TopkState(**scaled), hooks.topk_hook, scaled)):
        scheme = "dgc" if name == "dgc" else "topk"
        torch.manual_seed(23)
        model = RandomNet(widths, False, bias=False)
        reference = RandomNet(widths, False, bias=False)
        reference.load_state_dict(model.state_dict())
        ours = tcoll_torch.DistributedDataParallel(model, scheme=scheme, **options)
        theirs = torch.nn.parallel.DistributedDataParallel(reference, bucket_cap_mb=100)
        theirs.register_comm_hook(state, hook)
        for step in range(steps):
            for net, m in ((ours, model), (theirs, reference)):
                opt = torch.optim.SGD(m.parameters(), lr=0.1)
                opt.zero_grad()
                loss_of(net(batch(23, step, rank, widths[0], False)), False).backward()
                opt.step()
        out[name] = ([p.detach().clone() for p in model.parameters()],
                     [p.detach().clone() for p in reference.parameters()], ours.stats())
    return out


@pytest.mark.parametrize("size", [2, 3])
def test_topk_and_dgc_hooks_equal_the_schemes(size):
    results = run_ranks(body_sparse_hooks, size, 4, deadline=200)
    for scheme in ("topk", "dgc", "topk_scaled"):
        for r, res in enumerate(results):
            ours, theirs, stats = res[scheme]
            assert 0 < stats["k"] < sum(p.numel() for p in ours)
            for i, (a, b) in enumerate(zip(ours, theirs)):
                assert same_bits(a, b), f"{scheme}: rank {r}: parameter {i}: hook differs"
                assert same_bits(a, results[0][scheme][0][i]), f"{scheme}: rank {r}"


def body_registry_knobs(rank, size):
    import tcoll_torch
    from tcoll_torch import _C

    model = RandomNet([4, 3], False)
    out = {"names": [e["name"] for e in _C.compression_registry()],
           "dgc": next(e for e in _C.compression_registry() if e["name"] == "dgc")}
    for key, kwargs in (("unknown", {"scheme": "fp8"}),
                        ("dgc_residual", {"scheme": "dgc", "residual": "none"}),
                        ("topk_chunks", {"scheme": "topk", "chunk_elements": 8}),
                        ("float32_scale", {"wire_scale": 2.0}),
                        ("csc_wire", {"scheme": "csc", "wire": "bfloat16"}),
                        ("bad_rule", {"scheme": "topk", "residual": "momentum"})):
        try:
            tcoll_torch.DistributedDataParallel(model, **kwargs)
            out[key] = "accepted"
        except Exception as e:  # noqa: BLE001  the message is what is checked
            out[key] = str(e)
    return out


def test_scheme_names_and_knobs_are_the_registrys():
    for res in run_ranks(body_registry_knobs, 2, deadline=120):
        assert res["names"] == ["dense", "half", "bfloat16", "topk", "dgc", "csc", "sfb"]
        assert res["dgc"]["state"] == ["velocity", "accumulation"]
        assert res["dgc"]["momentum_in_result"] and "residual" not in res["dgc"]["knobs"]
        assert "schemes: dense, half, bfloat16, topk, dgc, csc, sfb" in res["unknown"]
        assert "scheme 'dgc' takes no knob 'residual'" in res["dgc_residual"]
        assert "scheme 'topk' takes no knob 'chunk_elements'" in res["topk_chunks"]
        assert "scheme 'dense' takes no knob 'wire_scale'" in res["float32_scale"]
        assert "scheme 'csc' sends float32" in res["csc_wire"]
        assert "unknown residual rule 'momentum'" in res["bad_rule"]


def test_hooks_on_pytorch_ddp():
    results = run_ranks(body_hooks, 2, 4, deadline=200)
    for r, res in enumerate(results):
        ours, theirs, density = res["csc"]
        assert density < 1.0  # the last step was sparse
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert same_bits(a, b), f"rank {r}: parameter {i}: csc_hook differs from scheme csc"
            assert same_bits(a, results[0]["csc"][0][i])
        runs = res["bf16"]
        for name in ("tcoll", "gloo"):
            for a, b in zip(runs[name], runs["plain"]):
                assert same_bits(a, b), f"rank {r}: bf16_hook on {name}"


class Scrambled(torch.nn.Module):
    """Layers registered in an order that is neither forward's nor backward's."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Linear(5, 4)
        self.a = torch.nn.Linear(3, 6)
        self.b = torch.nn.Linear(6, 5)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def body_rebuild(rank, size):
    import torch.distributed as dist

    import tcoll_torch

    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(31)
    model, reference = Scrambled(), Scrambled()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-1, 2, p.shape).float())
    reference.load_state_dict(model.state_dict())
    ours = tcoll_torch.DistributedDataParallel(model, planner="layerwise", rebuild_order=True)
    theirs = torch.nn.parallel.DistributedDataParallel(reference, process_group=gloo)
    names = {id(p): n for n, p in model.named_parameters()}
    orders = [[names[id(p)] for p in ours.parameters_in_backward_order()]]
    for net, m in ((ours, model), (theirs, reference)):
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        for step in range(4):
            opt.zero_grad()
            loss_of(net(batch(31, step, rank, 3, True)), True).backward()
            opt.step()
            if net is ours and step == 0:
                orders.append([names[id(p)] for p in ours.parameters_in_backward_order()])
    return orders, [p.detach().clone() for p in model.parameters()], \
        [p.detach().clone() for p in reference.parameters()]


def test_pool_rebuilt_in_arrival_order_after_the_first_iteration():
    for orders, ours, theirs in run_ranks(body_rebuild, 2):
        before, after = orders
        assert before[:2] == ["b.bias", "b.weight"]  # reverse registration
        assert {after[0], after[1]} == {"c.weight", "c.bias"}  # backward reaches c first
        assert {after[-1], after[-2]} == {"a.weight", "a.bias"}
        for a, b in zip(ours, theirs):
            assert same_bits(a, b)


def body_error(rank, size, kind):
    import torch.distributed as dist

    import tcoll_torch

    model, widths, _ = make_model(12, 0, True, allow_unused=False)
    if kind == "unused":
        widths = [3, 4, 2]
        ddp = tcoll_torch.DistributedDataParallel(RandomNet(widths, True))  # .unused gets none
        loss_of(ddp(batch(12, 0, rank, widths[0], True)), True).backward()
    elif kind == "plans":
        tcoll_torch.DistributedDataParallel(model, planner="layerwise" if rank == 0 else "single")
    elif kind == "planner":
        tcoll_torch.DistributedDataParallel(model, planner="fastest")
    elif kind == "stalled":
        ddp = tcoll_torch.DistributedDataParallel(model, planner="layerwise")
        if rank == 1:
            import time
            time.sleep(8)  # never runs backward: rank 0 must fail within the group's timeout
            return "stalled"
        loss_of(ddp(batch(12, 0, rank, widths[0], True)), True).backward()
    elif kind == "twice":
        from torch.utils.checkpoint import checkpoint

        class Twice(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)

            def forward(self, x):  # the reentrant checkpoint's inner backward accumulates
                return self.lin(checkpoint(self.lin, x, use_reentrant=True))  # lin's grad too

        ddp = tcoll_torch.DistributedDataParallel(Twice())
        ddp(torch.ones(2, 4, requires_grad=True)).sum().backward()
    elif kind == "gloo":
        gloo = dist.new_group(backend="gloo")
        tcoll_torch.DistributedDataParallel(model, process_group=gloo)
    return "no error"


@pytest.mark.parametrize("kind,expect", [
    ("unused", "find_unused_parameters=True"),
    ("plans", "runs a different plan"),
    ("planner", "unknown planner 'fastest'"),
    ("stalled", "timed out"),
    ("gloo", "not tcoll"),
    ("twice", "got its gradient twice in one backward"),
])
def test_errors_are_clear_and_never_hang(kind, expect):
    import time
    start = time.monotonic()
    results, errors = run_ranks(body_error, 2, kind, timeout_s=4, deadline=60, allow_errors=True)
    assert 0 in errors, f"rank 0 did not fail: {results}"
    assert expect in errors[0], errors  # every rank's, to see which failed first
    assert time.monotonic() - start < 45


def test_simulator_trace_and_prediction_by_hand(tmp_path):
    # two tensors in two buckets after a 5 us forward: backward 10 and 20 us, a link of
    # 1 us + 0.01 us per byte. Bucket 0 (100 B) is ready at 15 and takes 2 us; bucket 1
    # (200 B) is ready at 35 and takes 3 us: the iteration ends at 38 us.
    import json

    import harness
    if harness.PYTHON_DIR not in sys.path:
        sys.path.insert(0, harness.PYTHON_DIR)
    from tcoll_torch import _C

    args = ([1, 2], [100, 200], [10.0, 20.0], 5.0, 1.0, 0.01)
    assert abs(_C.predict_iteration_us(*args) - 38.0) < 1e-9
    path = tmp_path / "predicted.json"
    _C.write_predicted_trace(str(path), *args)
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    slices = sorted((e["name"], e["ts"], e["dur"]) for e in events)
    assert slices == [("ALLREDUCE", 15, 2), ("ALLREDUCE", 35, 3), ("BACKWARD", 5, 10),
                      ("BACKWARD", 15, 20), ("FORWARD", 0, 5)]
    with pytest.raises(Exception, match="do not partition"):
        _C.write_predicted_trace(str(path), [1], [100, 200], [10.0, 20.0], 5.0, 1.0, 0.01)
