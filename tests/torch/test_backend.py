"""The "tcoll" torch.distributed backend (python/tcoll_torch) against references computed
here from every rank's inputs (never through tcoll), on 1-4 spawned processes.

Floating-point inputs are fractional (integer-valued ones would give the same bits in any
summation order and hide drift): results must be within the reassociation bound of an exact
reference and bitwise identical on every rank.
"""
import os
import sys
import time

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import RankFailed, run_ranks  # noqa: E402

DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int8": torch.int8, "uint8": torch.uint8,
    "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
}
FLOATS = {"float32", "float64", "float16", "bfloat16"}
# relative bound per element for a sum of P <= 4 fractional terms (accumulated in float
# for the 16-bit types, rounded once at the end)
RTOL = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1.6e-2}


def make_input(rank, n, dtype_name, op, seed):
    """Rank `rank`'s input: fractional floats (near 1 for PRODUCT), small integers."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype_name in FLOATS:
        if op == "PRODUCT":
            x = 1.0 + (torch.rand(n, generator=g, dtype=torch.float64) - 0.5) / 8
        else:
            x = torch.rand(n, generator=g, dtype=torch.float64) * 2 - 0.75
        return x.to(DTYPES[dtype_name])
    if dtype_name == "bool":
        return torch.randint(0, 2, (n,), generator=g).to(torch.bool)
    if op == "PRODUCT":
        low, high = (1, 3) if dtype_name == "uint8" else (-1, 2)
        return torch.randint(low, high, (n,), generator=g).to(DTYPES[dtype_name])
    low = 0 if dtype_name == "uint8" else -20
    return torch.randint(low, 21, (n,), generator=g).to(DTYPES[dtype_name])


def reference(inputs, dtype_name, op):
    """The exact result of `op` over the ranks' inputs, in float64 / int64 / bool."""
    if dtype_name == "bool":
        s = torch.stack(inputs)
        if op in ("SUM", "MAX", "BOR"):
            return s.any(0)
        if op in ("PRODUCT", "MIN", "BAND"):
            return s.all(0)
        return (s.to(torch.int64).sum(0) % 2).to(torch.bool)  # BXOR
    wide = torch.float64 if dtype_name in FLOATS else torch.int64
    s = torch.stack([x.to(wide) for x in inputs])
    if op == "SUM":
        r = s.sum(0)
    elif op == "AVG":
        r = s.sum(0) / len(inputs) if dtype_name in FLOATS else torch.div(
            s.sum(0), len(inputs), rounding_mode="trunc")
    elif op == "PRODUCT":
        r = s.prod(0)
    elif op == "MIN":
        r = s.min(0).values
    elif op == "MAX":
        r = s.max(0).values
    else:
        r = s[0].clone()
        for x in s[1:]:
            r = {"BAND": r & x, "BOR": r | x, "BXOR": r ^ x}[op]
    return r


def check_close(got, want, dtype_name, what):
    if dtype_name in FLOATS:
        got64 = got.to(torch.float64)
        bound = RTOL[dtype_name] * want.abs().clamp_min(1.0)
        err = (got64 - want).abs()
        assert bool((err <= bound).all()), f"{what}: max error {err.max().item()}"
    elif dtype_name == "bool":
        assert torch.equal(got, want), what
    else:
        assert torch.equal(got.to(torch.int64), want.to(DTYPES[dtype_name]).to(torch.int64)), \
            f"{what}: {got[:8]} vs {want[:8]}"


def same_bits(a, b):
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def ops_for(dtype_name):
    if dtype_name == "bool":
        return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
    ops = ["SUM", "AVG", "PRODUCT", "MIN", "MAX"]
    if dtype_name not in FLOATS:
        ops += ["BAND", "BOR", "BXOR"]
    return ops


def allreduce_cases():
    cases, seed = [], 1
    for dtype_name in DTYPES:
        for op in ops_for(dtype_name):
            for n in (1, 7, 1000, 70001):
                cases.append((dtype_name, op, n, seed))
                seed += 1
    return cases


# ---------------------------------------------------------------------------------------
# rank bodies (module level: spawned processes import them)

def body_allreduce(rank, size, cases):
    import torch.distributed as dist
    out = []
    for dtype_name, op, n, seed in cases:
        x = make_input(rank, n, dtype_name, op, seed)
        y = x.clone()
        dist.all_reduce(y, op=getattr(dist.ReduceOp, op))
        out.append(y)
    return out


def body_collectives(rank, size, n):
    import torch.distributed as dist
    res = {}
    x = make_input(rank, n, "float32", "SUM", 7)
    # allgather (list) and all_gather_into_tensor
    lst = [torch.empty(n) for _ in range(size)]
    dist.all_gather(lst, x)
    res["all_gather"] = torch.stack(lst)
    out = torch.empty(size * n)
    dist.all_gather_into_tensor(out, x)
    res["all_gather_into_tensor"] = out
    # reduce_scatter (list) and reduce_scatter_tensor
    big = make_input(rank, size * n, "float64", "SUM", 8)
    rs = torch.empty(n, dtype=torch.float64)
    dist.reduce_scatter(rs, list(big.chunk(size)))
    res["reduce_scatter"] = rs
    rs2 = torch.empty(n, dtype=torch.float64)
    dist.reduce_scatter_tensor(rs2, big, op=dist.ReduceOp.MAX)
    res["reduce_scatter_tensor_max"] = rs2
    # broadcast from every root, reduce to every root
    for root in range(size):
        b = make_input(rank, n, "int32", "SUM", 9 + root)
        dist.broadcast(b, src=root)
        res[f"broadcast{root}"] = b
        # 51208 bytes of fractional values: the collective area's broadcast in 8 KiB pieces
        # and a remainder on 2 ranks (with a CPU each), the binomial tree on more
        big_b = make_input(rank, 6401, "float64", "SUM", 50 + root)
        dist.broadcast(big_b, src=root)
        res[f"broadcast_big{root}"] = big_b
        r = make_input(rank, n, "float32", "SUM", 20 + root)
        dist.reduce(r, dst=root)
        if rank == root:
            res[f"reduce{root}"] = r
        # 51208 bytes, in place at the root (which may not be rank 0): the collective area's
        # reduce in 8 KiB pieces and a remainder on 2 ranks with a CPU each; on more, in one
        # piece of its bulk buffer where they share CPUs, by slices where not (rank order
        # every way)
        big_r = make_input(rank, 6401, "float64", "SUM", 60 + root)
        dist.reduce(big_r, dst=root)
        if rank == root:
            res[f"reduce_big{root}"] = big_r
    # gather / scatter to and from root size-1
    root = size - 1
    g = [torch.empty(n) for _ in range(size)] if rank == root else None
    dist.gather(x, g, dst=root)
    if rank == root:
        res["gather"] = torch.stack(g)
    sc = torch.empty(n, dtype=torch.int64)
    chunks = [make_input(root, n, "int64", "SUM", 30 + q) for q in range(size)]
    dist.scatter(sc, chunks if rank == root else None, src=root)
    res["scatter"] = sc
    # all_to_all_single, even and uneven splits (rank r sends q+1 rows to rank q)
    a = make_input(rank, size * 3, "int32", "SUM", 40).view(size * 3)
    b = torch.empty_like(a)
    dist.all_to_all_single(b, a)
    res["all_to_all_even"] = b
    in_splits = [q + 1 for q in range(size)]
    out_splits = [rank + 1] * size
    src = make_input(rank, sum(in_splits) * 2, "float32", "SUM", 41).view(-1, 2)
    dst = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(dst, src, out_splits, in_splits)
    res["all_to_all_uneven"] = dst
    # send / recv around a ring
    if size > 1:
        nxt, prv = (rank + 1) % size, (rank - 1) % size
        got = torch.empty(n)
        if rank % 2 == 0:
            dist.send(x, nxt)
            dist.recv(got, prv)
        else:
            dist.recv(got, prv)
            dist.send(x, nxt)
        res["ring_recv"] = got
    dist.barrier()
    return res


def body_async_and_noncontiguous(rank, size):
    import torch.distributed as dist
    res = {}
    # several async allreduces in flight, waited in reverse; a future chained with then()
    xs = [make_input(rank, 5000 + k, "float32", "SUM", 50 + k) for k in range(4)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    for w in reversed(works):
        w.wait()
    res["async"] = xs
    y = make_input(rank, 300, "float64", "SUM", 60)
    fut = dist.all_reduce(y, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    res["then"] = fut.wait()
    # non-contiguous: a transposed matrix, a strided view
    m = make_input(rank, 12 * 5, "float32", "SUM", 61).view(12, 5).t()
    assert not m.is_contiguous()
    dist.all_reduce(m)
    res["transposed"] = m.clone()
    base = make_input(rank, 40, "int64", "SUM", 62)
    view = base[::2]
    dist.broadcast(view, src=0)
    res["strided_broadcast"] = base.clone()
    return res


def body_subgroups(rank, size):
    import torch.distributed as dist
    res = {}
    evens = dist.new_group([r for r in range(size) if r % 2 == 0], backend="tcoll")
    low = dist.new_group([0, 1], backend="tcoll")
    for it in range(3):  # the two overlapping groups used in alternation
        if rank % 2 == 0:
            x = make_input(rank, 100 + it, "float32", "SUM", 70 + it)
            dist.all_reduce(x, group=evens)
            res[f"evens{it}"] = x
        if rank in (0, 1):
            y = make_input(rank, 50 + it, "float64", "SUM", 80 + it)
            dist.all_reduce(y, group=low)
            res[f"low{it}"] = y
    z = make_input(rank, 64, "float32", "SUM", 90)
    dist.all_reduce(z)
    res["world"] = z
    return res


# ---------------------------------------------------------------------------------------
# tests

@pytest.mark.parametrize("size", [1, 2, 3])
def test_allreduce_every_dtype_and_op(size):
    cases = allreduce_cases()
    if size == 1:
        cases = [c for c in cases if c[2] <= 1000]
    results = run_ranks(body_allreduce, size, cases)
    for k, (dtype_name, op, n, seed) in enumerate(cases):
        inputs = [make_input(r, n, dtype_name, op, seed) for r in range(size)]
        want = reference(inputs, dtype_name, op)
        what = f"all_reduce {dtype_name} {op} n={n} P={size}"
        for r in range(size):
            assert results[r][k].dtype == DTYPES[dtype_name], what
            check_close(results[r][k], want, dtype_name, f"{what} rank {r}")
            assert same_bits(results[r][k], results[0][k]), f"{what}: rank {r} differs from 0"


@pytest.mark.parametrize("size", [2, 3, 4])
def test_other_collectives(size):
    n = 1003
    results = run_ranks(body_collectives, size, n)
    xs = [make_input(r, n, "float32", "SUM", 7) for r in range(size)]
    bigs = [make_input(r, size * n, "float64", "SUM", 8) for r in range(size)]
    for r in range(size):
        res = results[r]
        assert torch.equal(res["all_gather"], torch.stack(xs))
        assert torch.equal(res["all_gather_into_tensor"], torch.cat(xs))
        want_rs = reference([b.chunk(size)[r] for b in bigs], "float64", "SUM")
        check_close(res["reduce_scatter"], want_rs, "float64", "reduce_scatter")
        want_max = torch.stack([b.chunk(size)[r] for b in bigs]).max(0).values
        assert torch.equal(res["reduce_scatter_tensor_max"], want_max)
        for root in range(size):
            assert torch.equal(res[f"broadcast{root}"], make_input(root, n, "int32", "SUM", 9 + root))
            assert torch.equal(res[f"broadcast_big{root}"],
                               make_input(root, 6401, "float64", "SUM", 50 + root))
            if r == root:
                want = reference([make_input(q, n, "float32", "SUM", 20 + root)
                                  for q in range(size)], "float32", "SUM")
                check_close(res[f"reduce{root}"], want, "float32", f"reduce to {root}")
                # folded in rank order, bit for bit (float64 adds in torch are IEEE's)
                fold = make_input(0, 6401, "float64", "SUM", 60 + root)
                for q in range(1, size):
                    fold = fold + make_input(q, 6401, "float64", "SUM", 60 + root)
                assert torch.equal(res[f"reduce_big{root}"], fold), f"big reduce to {root}"
        if r == size - 1:
            assert torch.equal(res["gather"], torch.stack(xs))
        assert torch.equal(res["scatter"], make_input(size - 1, n, "int64", "SUM", 30 + r))
        a = [make_input(q, size * 3, "int32", "SUM", 40) for q in range(size)]
        assert torch.equal(res["all_to_all_even"], torch.cat([a[q][r * 3:(r + 1) * 3]
                                                              for q in range(size)]))
        srcs = [make_input(q, sum(range(1, size + 1)) * 2, "float32", "SUM", 41).view(-1, 2)
                for q in range(size)]
        start = sum(range(1, r + 1))  # rows before block r: 1 + 2 + ... + r
        want = torch.cat([srcs[q][start:start + r + 1] for q in range(size)])
        assert torch.equal(res["all_to_all_uneven"], want)
        assert torch.equal(res["ring_recv"], xs[(r - 1) % size])
    for r in range(size):  # the same bits everywhere
        assert same_bits(results[r]["reduce_scatter"], results[r]["reduce_scatter"])
    # These calls are small enough for the segment's collective area (in_segment), which
    # reduces in rank order, once per element: the results are the sequential fold of the
    # ranks' inputs, bit for bit (the ring's order would differ in the last bits)
    for r in range(size):
        assert same_bits(results[r]["reduce_scatter"],
                         rank_order_sum([b.chunk(size)[r] for b in bigs])), f"rank {r}"
    for root in range(size):
        want = rank_order_sum([make_input(q, n, "float32", "SUM", 20 + root) for q in range(size)])
        assert same_bits(results[root][f"reduce{root}"], want), f"reduce to {root}"


def rank_order_sum(xs):
    """xs[0] + xs[1] + ... in that order, in their dtype."""
    acc = xs[0].clone()
    for x in xs[1:]:
        acc = acc + x
    return acc


def test_async_futures_and_noncontiguous_tensors():
    size = 3
    results = run_ranks(body_async_and_noncontiguous, size)
    for r in range(size):
        res = results[r]
        for k in range(4):
            want = reference([make_input(q, 5000 + k, "float32", "SUM", 50 + k)
                              for q in range(size)], "float32", "SUM")
            check_close(res["async"][k], want, "float32", f"async allreduce {k}")
            assert same_bits(res["async"][k], results[0]["async"][k])
        want = reference([make_input(q, 300, "float64", "SUM", 60) for q in range(size)],
                         "float64", "SUM") * 2
        check_close(res["then"], want, "float64", "future.then")
        want = reference([make_input(q, 60, "float32", "SUM", 61) for q in range(size)],
                         "float32", "SUM").view(12, 5).t()
        check_close(res["transposed"], want, "float32", "transposed allreduce")
        base = make_input(r, 40, "int64", "SUM", 62)
        base[::2] = make_input(0, 40, "int64", "SUM", 62)[::2]
        assert torch.equal(res["strided_broadcast"], base), "strided broadcast"


def test_subgroups_overlapping_in_alternation():
    size = 4
    results = run_ranks(body_subgroups, size)
    for it in range(3):
        want = reference([make_input(q, 100 + it, "float32", "SUM", 70 + it) for q in (0, 2)],
                         "float32", "SUM")
        for r in (0, 2):
            check_close(results[r][f"evens{it}"], want, "float32", "even sub-group")
        assert same_bits(results[0][f"evens{it}"], results[2][f"evens{it}"])
        want = reference([make_input(q, 50 + it, "float64", "SUM", 80 + it) for q in (0, 1)],
                         "float64", "SUM")
        for r in (0, 1):
            check_close(results[r][f"low{it}"], want, "float64", "low sub-group")
    want = reference([make_input(q, 64, "float32", "SUM", 90) for q in range(size)],
                     "float32", "SUM")
    for r in range(size):
        check_close(results[r]["world"], want, "float32", "world after sub-groups")
        assert same_bits(results[r]["world"], results[0]["world"])


# all_to_all_single of equal blocks with Bruck forced (tcoll's default picks it only from 16
# ranks): (rows per block, columns, explicit equal splits; a call with split sizes takes the
# exchange of blocks whatever they are, as the ranks of one call must choose alike). The
# calls are asynchronous:
# 6000 floats per block are more than the 64 KiB a call may run inline, so that one is
# queued on the engine
BRUCK_SHAPES = ((1, 1, False), (7, 1, False), (3, 2, True), (6000, 1, False))


def alltoall_value(src, dst, e):
    """Element e of the block rank `src` sends rank `dst`: fractional, exact in float32 and
    distinct per (source, destination, element) for dst < 8 and e < 8191."""
    return src + dst / 8 + (e + 1) / 65536


def alltoall_block(src, dst, rows, cols):
    n = rows * cols
    return torch.tensor([alltoall_value(src, dst, e) for e in range(n)]).view(rows, cols)


def body_all_to_all_bruck(rank, size):
    # read once per process, when the first all_to_all_single of equal blocks is made
    os.environ["TCOLL_ALLTOALL_ALGO"] = "bruck:0-max"
    return all_to_all_equal_blocks(rank, size)


def body_all_to_all_in_segment(rank, size):
    # the collective area asked for every size: calls that may run on the engine (the
    # 6000-row one) take the pairwise exchange instead
    os.environ["TCOLL_ALLTOALL_ALGO"] = "in_segment:0-max"
    return all_to_all_equal_blocks(rank, size)


def body_all_to_all_default(rank, size):
    # the built-in choice: the collective area for the small calls, which run in the
    # caller's thread, the pairwise exchange for the queued one
    os.environ.pop("TCOLL_ALLTOALL_ALGO", None)
    return all_to_all_equal_blocks(rank, size)


def all_to_all_equal_blocks(rank, size):
    import torch.distributed as dist
    res = {}
    for k, (rows, cols, splits) in enumerate(BRUCK_SHAPES):
        x = torch.cat([alltoall_block(rank, q, rows, cols) for q in range(size)])
        kept = x.clone()
        y = torch.full_like(x, -1.0)
        if splits:
            work = dist.all_to_all_single(y, x, [rows] * size, [rows] * size, async_op=True)
        else:
            work = dist.all_to_all_single(y, x, async_op=True)
        work.wait()
        res[k] = y
        res[f"input{k}"] = torch.equal(x, kept)
    return res


@pytest.mark.parametrize("body,size", [(body_all_to_all_bruck, 3), (body_all_to_all_bruck, 4),
                                       (body_all_to_all_default, 2),
                                       (body_all_to_all_default, 4),
                                       (body_all_to_all_in_segment, 3)])
def test_all_to_all_single_of_equal_blocks_by_bruck_and_the_area(body, size):
    results = run_ranks(body, size)
    for r in range(size):
        for k, (rows, cols, _) in enumerate(BRUCK_SHAPES):
            want = torch.cat([alltoall_block(q, r, rows, cols) for q in range(size)])
            assert torch.equal(results[r][k], want), f"rank {r}, blocks of {rows}x{cols}"
            assert results[r][f"input{k}"], f"rank {r}: the input of case {k} changed"


def body_all_to_all_disagreeing(rank, size):
    import torch.distributed as dist
    os.environ.pop("TCOLL_ALLTOALL_ALGO", None)
    n = 1 if rank == 0 else 2  # a program error: the ranks disagree on the block
    try:
        dist.all_to_all_single(torch.empty(size * n), torch.ones(size * n))
    except RuntimeError as e:
        return str(e)
    return "no error"


def test_all_to_all_single_of_small_equal_blocks_runs_in_the_collective_area():
    # the area reports ranks that disagree by the call's signature, which only the area
    # publishes: the error names it (the exchange would report a message of another size)
    for text in run_ranks(body_all_to_all_disagreeing, 2):
        assert "in-segment collective" in text and "every rank must pass the same" in text, text


def body_all_to_all_bad_choice(rank, size):
    import torch.distributed as dist
    os.environ["TCOLL_ALLTOALL_ALGO"] = "ring:0-max"  # not an all-to-all algorithm
    try:
        dist.all_to_all_single(torch.empty(size), torch.ones(size))
    except RuntimeError as e:
        return str(e)
    return "no error"


def test_all_to_all_single_of_equal_blocks_reads_tcoll_alltoall_algo():
    # the choice is made at the call: a selection the library refuses fails there
    for text in run_ranks(body_all_to_all_bad_choice, 2):
        assert "unknown algorithm 'ring' for alltoall" in text, text


STAGED_COUNTS = (10, 20000, 262144, 262145, 600000)  # 40 B to 2.4 MB; 262144 floats: 1 MiB


def body_staged(rank, size):
    import torch.distributed as dist
    import tcoll_torch
    res = {}
    # the ranks ask for different staging sizes: they must agree on the smaller, 1 MiB, or
    # rank 1 would stage (and run recursive doubling on) calls rank 0 runs unstaged
    os.environ["TCOLL_TORCH_STAGING_BYTES"] = "1M" if rank == 0 else "4M"
    staged = dist.new_group([0, 1], backend="tcoll")
    os.environ["TCOLL_TORCH_STAGING_BYTES"] = "0"
    plain = dist.new_group([0, 1], backend="tcoll")
    for name, g in (("staged", staged), ("plain", plain)):
        b = g._get_backend(torch.device("cpu"))
        before = tcoll_torch._C.registered_messages(b)
        outs, works = [], []
        for k, n in enumerate(STAGED_COUNTS):  # in flight together: inline and engine calls
            outs.append(make_input(rank, n, "float32", "SUM", 110 + k))
            works.append(dist.all_reduce(outs[-1], group=g, async_op=True))
        for w in works:
            w.wait()
        res[name] = outs
        res[name + "_registered"] = tcoll_torch._C.registered_messages(b) - before
    return res


def test_two_rank_allreduce_staged_through_registered_memory():
    results = run_ranks(body_staged, 2)
    for name in ("staged", "plain"):
        for k, n in enumerate(STAGED_COUNTS):
            want = reference([make_input(q, n, "float32", "SUM", 110 + k) for q in range(2)],
                             "float32", "SUM")
            for r in range(2):
                check_close(results[r][name][k], want, "float32", f"{name} n={n} rank {r}")
            assert same_bits(results[1][name][k], results[0][name][k]), f"{name} n={n}"
    for r in range(2):
        # each call above the in-segment range (16 KiB on 2 ranks: the 40 B call runs in the
        # segment's collective area) and up to the agreed 1 MiB sends its one message from
        # the staging buffer
        assert results[r]["staged_registered"] == 2, results[r]["staged_registered"]
        assert results[r]["plain_registered"] == 0


MIXED_COUNTS = (16, 131072, 3, 65536, 40000)  # 64 B inline; 512 KiB queued; 12 B; 256 KiB; 160 KB


def body_mixed_threads(rank, size):
    import torch.distributed as dist
    # calls of up to 64 KiB run in the caller's thread (the in-segment allreduce and
    # broadcast may run there); larger asynchronous ones queue on the engine, and a larger
    # call waited for at once runs in the caller's thread only if the engine is idle then,
    # which differs between ranks: the ranks must still agree on every call's algorithm
    outs, works = [], []
    for it in range(12):
        for k, n in enumerate(MIXED_COUNTS):
            x = make_input(rank, n, "float32", "SUM", 300 + 10 * it + k)
            if k % 2 == 1:
                works.append(dist.all_reduce(x, async_op=True))
            else:
                dist.all_reduce(x)
            outs.append(x)
        b = torch.full((50,), float(rank) + 0.25) if rank == it % size else torch.zeros(50)
        dist.broadcast(b, src=it % size)
        outs.append(b)
    for w in works:
        w.wait()
    return outs


def test_small_calls_in_the_segment_beside_queued_calls_on_the_engine():
    size = 3
    results = run_ranks(body_mixed_threads, size)
    at = 0
    for it in range(12):
        for k, n in enumerate(MIXED_COUNTS):
            want = reference([make_input(q, n, "float32", "SUM", 300 + 10 * it + k)
                              for q in range(size)], "float32", "SUM")
            for r in range(size):
                check_close(results[r][at], want, "float32", f"it {it} n={n} rank {r}")
                assert same_bits(results[r][at], results[0][at]), f"it {it} n={n} rank {r}"
            at += 1
        for r in range(size):
            assert torch.equal(results[r][at], torch.full((50,), float(it % size) + 0.25))
        at += 1


def body_staging_too_large(rank, size):
    import torch.distributed as dist
    import tcoll_torch
    # more than /dev/shm holds: posix_fallocate fails at once on every rank, and the group
    # must still work, unstaged
    os.environ["TCOLL_TORCH_STAGING_BYTES"] = "1024G"
    g = dist.new_group([0, 1], backend="tcoll")
    b = g._get_backend(torch.device("cpu"))
    x = make_input(rank, 50000, "float32", "SUM", 130)
    dist.all_reduce(x, group=g)
    return {"x": x, "registered": tcoll_torch._C.registered_messages(b)}


def test_staging_larger_than_dev_shm_falls_back_unstaged():
    st = os.statvfs("/dev/shm")
    shm_bytes = st.f_blocks * st.f_frsize
    if shm_bytes == 0 or shm_bytes >= 1024 << 30:
        pytest.skip(f"/dev/shm holds {shm_bytes} bytes: 1 TiB of staging would not fail at once")
    results = run_ranks(body_staging_too_large, 2)
    want = reference([make_input(q, 50000, "float32", "SUM", 130) for q in range(2)],
                     "float32", "SUM")
    for r in range(2):
        check_close(results[r]["x"], want, "float32", f"rank {r}")
        assert same_bits(results[r]["x"], results[0]["x"])
        assert results[r]["registered"] == 0


def body_bad_staging_size(rank, size):
    import torch.distributed as dist
    os.environ["TCOLL_TORCH_STAGING_BYTES"] = "4M" if rank == 0 else "four"
    try:
        dist.new_group([0, 1], backend="tcoll")
    except Exception as e:  # noqa: BLE001  the message is the result
        return str(e)
    return "no error"


def test_unparsable_staging_size_fails_on_every_rank():
    results = run_ranks(body_bad_staging_size, 2)
    for r in range(2):
        assert f"rank {r}: TCOLL_TORCH_STAGING_BYTES of rank 1 is not a size" in results[r], \
            results[r]


def body_blocking_after_queued(rank, size):
    import torch.distributed as dist
    # 1 MiB: queued on the engine when asynchronous; the blocking call on the same tensor
    # right after it must wait its turn, not run at once in this thread and overtake it
    # (MAX then SUM gives twice the maximum; SUM then MAX, or a mix, gives something else)
    x = make_input(rank, 262144, "float32", "SUM", 120)
    work = dist.all_reduce(x, op=dist.ReduceOp.MAX, async_op=True)
    dist.all_reduce(x)
    work.wait()
    return x


def test_blocking_call_does_not_overtake_a_queued_one():
    size = 2
    results = run_ranks(body_blocking_after_queued, size)
    inputs = [make_input(q, 262144, "float32", "SUM", 120) for q in range(size)]
    first = reference(inputs, "float32", "MAX").to(torch.float32)
    want = reference([first] * size, "float32", "SUM")  # every rank holds the maximum
    for r in range(size):
        check_close(results[r], want, "float32", f"rank {r}")
        assert same_bits(results[r], results[0])


def body_direct_all_reduce(rank, size):
    import torch.distributed as dist
    import tcoll_torch
    out = {}
    # the direct call on the default group, fractional inputs, three ops and sizes
    # (inline, staged, engine-sized), then on a sub-group
    for op, n in (("SUM", 7), ("MAX", 70001), ("AVG", 1 << 20)):
        x = make_input(rank, n, "float32", op, 130)
        tcoll_torch.all_reduce(x, op=getattr(dist.ReduceOp, op))
        out[op] = x
    sub = dist.new_group([0, size - 1], backend="tcoll")
    if rank in (0, size - 1):
        y = make_input(rank, 1001, "float64", "SUM", 131)
        tcoll_torch.all_reduce(y, group=sub)
        out["sub"] = y
    # it keeps the group's order: an async MAX queued on the engine, then the direct SUM
    # on the same tensor gives twice the maximum
    z = make_input(rank, 262144, "float32", "SUM", 120)
    work = dist.all_reduce(z, op=dist.ReduceOp.MAX, async_op=True)
    tcoll_torch.all_reduce(z)
    work.wait()
    out["order"] = z
    gloo = dist.new_group(backend="gloo")
    try:  # a group whose CPU backend is Gloo
        tcoll_torch.all_reduce(torch.ones(3), group=gloo)
        out["gloo"] = "no error"
    except ValueError as e:
        out["gloo"] = str(e)
    # no rank leaves (closing its Gloo sockets) while another still connects its mesh
    dist.barrier()
    return out


def test_direct_all_reduce():
    size = 3
    results = run_ranks(body_direct_all_reduce, size)
    for op, n in (("SUM", 7), ("MAX", 70001), ("AVG", 1 << 20)):
        want = reference([make_input(q, n, "float32", op, 130) for q in range(size)],
                         "float32", op)
        for r in range(size):
            check_close(results[r][op], want, "float32", f"{op} n={n} rank {r}")
            assert same_bits(results[r][op], results[0][op]), f"{op}: rank {r} differs"
    want = reference([make_input(q, 1001, "float64", "SUM", 131) for q in (0, size - 1)],
                     "float64", "SUM")
    for r in (0, size - 1):
        check_close(results[r]["sub"], want, "float64", f"sub-group rank {r}")
        assert same_bits(results[r]["sub"], results[0]["sub"])
    assert "sub" not in results[1]
    first = reference([make_input(q, 262144, "float32", "SUM", 120) for q in range(size)],
                      "float32", "MAX").to(torch.float32)
    want = reference([first] * size, "float32", "SUM")
    for r in range(size):
        check_close(results[r]["order"], want, "float32", f"queued MAX then direct SUM, rank {r}")
        assert "not tcoll" in results[r]["gloo"], results[r]["gloo"]


def sparse_input(rank, seed):
    """Rank `rank`'s sparse COO tensor of shape (9, 7, 3) (two sparse dimensions, one dense):
    fractional values, indices that repeat within the rank and across ranks, a different
    count per rank, none at all on rank 1."""
    g = torch.Generator().manual_seed(seed * 100 + rank)
    nnz = 0 if rank == 1 else 5 + 4 * rank
    indices = torch.stack([torch.randint(0, 9, (nnz,), generator=g),
                           torch.randint(0, 7, (nnz,), generator=g)])
    values = torch.rand(nnz, 3, generator=g, dtype=torch.float64) * 2 - 0.75
    return torch.sparse_coo_tensor(indices, values.to(torch.float32), (9, 7, 3))


class SparseEmbeddingModel(torch.nn.Module):
    """An embedding bag with sparse gradients (DDP allreduces them as sparse tensors) and a
    dense head."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.EmbeddingBag(50, 8, mode="sum", sparse=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, words, offsets):
        return self.head(self.embedding(words, offsets))


def body_sparse_and_coalesced(rank, size, steps):
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _coalescing_manager
    res = {}
    x = sparse_input(rank, 1)
    dist.all_reduce(x)
    res["sparse_sum"], res["sparse_sum_coalesced"] = x, x.is_coalesced()
    if dist.get_backend() == "tcoll":  # Gloo sums sparse tensors only
        y = sparse_input(rank, 2).to(torch.float64)
        dist.all_reduce(y, op=dist.ReduceOp.AVG)
        res["sparse_avg"] = y
    # torch's coalescing fast path: several calls issued as one
    ins = [make_input(rank, n, "float32", "SUM", 120 + n) for n in (5, 17)]
    outs = [torch.empty(size * i.numel()) for i in ins]
    with _coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    res["gathered"] = outs
    ins = [make_input(rank, size * n, "float64", "SUM", 130 + n) for n in (3, 11)]
    outs = [torch.empty(i.numel() // size, dtype=torch.float64) for i in ins]
    with _coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i)
    cm.wait()
    res["scattered"] = outs
    # batch_isend_irecv, a ring exchange: tcoll says it coalesces, so torch brackets the
    # operations with start/endCoalescing and waits on the one work that returns
    send = make_input(rank, 9, "float32", "SUM", 140)
    recv = torch.empty(9)
    ops = [dist.P2POp(dist.isend, send, (rank + 1) % size),
           dist.P2POp(dist.irecv, recv, (rank - 1) % size)]
    works = dist.batch_isend_irecv(ops)
    for w in works:
        w.wait()
    res["ring"], res["ring_works"] = recv, len(works)
    if dist.get_backend() == "tcoll":  # Gloo does not coalesce
        # the coalescing manager with a device: its fast path (one allreduce_coalesced) in
        # torch's start/endCoalescing bracket
        a, b = (make_input(rank, n, "float64", "SUM", 150 + n) for n in (6, 70))
        with _coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
            dist.all_reduce(a)
            dist.all_reduce(b)
        cm.wait()
        res["bracketed"] = [a, b]
    # PyTorch's DDP with sparse gradients (it allreduces them as sparse tensors)
    torch.manual_seed(0)
    model = SparseEmbeddingModel()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1000 + rank)
    for _ in range(steps):
        words = torch.randint(0, 50, (24,), generator=g)
        offsets = torch.arange(0, 24, 3)
        labels = torch.randint(0, 3, (8,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(words, offsets), labels).backward()
        opt.step()
    res["params"] = [p.detach().clone() for p in model.parameters()]
    return res


def test_sparse_allreduce_coalescing_and_sparse_ddp():
    size, steps = 3, 4
    on_tcoll = run_ranks(body_sparse_and_coalesced, size, steps, backend="tcoll")
    on_gloo = run_ranks(body_sparse_and_coalesced, size, steps, backend="gloo")
    sparse_sum = sum(sparse_input(q, 1).to_dense() for q in range(size))  # rank order
    sparse_avg = reference([sparse_input(q, 2).to(torch.float64).to_dense()
                            for q in range(size)], "float64", "AVG")
    for r in range(size):
        res = on_tcoll[r]
        # a sum in rank order of coalesced parts: the bits of the dense sum in rank order
        assert res["sparse_sum_coalesced"]
        assert torch.equal(res["sparse_sum"].to_dense(), sparse_sum), f"sparse sum rank {r}"
        check_close(res["sparse_avg"].to_dense(), sparse_avg, "float64", "sparse average")
        for key in ("sparse_sum", "sparse_avg"):
            a, b = res[key], on_tcoll[0][key]
            assert torch.equal(a.indices(), b.indices()), f"{key}: rank {r} differs from 0"
            assert same_bits(a.values(), b.values()), f"{key}: rank {r} differs from 0"
        for k, n in enumerate((5, 17)):
            want = torch.cat([make_input(q, n, "float32", "SUM", 120 + n) for q in range(size)])
            assert torch.equal(res["gathered"][k], want), f"coalesced all_gather {k}"
        for k, n in enumerate((3, 11)):
            want = reference([make_input(q, size * n, "float64", "SUM", 130 + n)[r * n:(r + 1) * n]
                              for q in range(size)], "float64", "SUM")
            check_close(res["scattered"][k], want, "float64", f"coalesced reduce_scatter {k}")
        assert torch.equal(res["ring"], make_input((r - 1) % size, 9, "float32", "SUM", 140))
        assert res["ring_works"] == 1, "batch_isend_irecv: one coalesced work"
        assert on_gloo[r]["ring_works"] == 2  # Gloo's: one work per operation
        for k, n in enumerate((6, 70)):
            want = reference([make_input(q, n, "float64", "SUM", 150 + n) for q in range(size)],
                             "float64", "SUM")
            check_close(res["bracketed"][k], want, "float64", f"bracketed all_reduce {k}")
            assert same_bits(res["bracketed"][k], on_tcoll[0]["bracketed"][k])
        for p, (a, b) in enumerate(zip(res["params"], on_gloo[r]["params"])):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"sparse DDP param {p} rank {r}"
            assert same_bits(a, on_tcoll[0]["params"][p]), f"param {p}: rank {r} differs from 0"


def body_mixed_backends(rank, size):
    import torch.distributed as dist
    x = make_input(rank, 33, "float32", "SUM", 100)
    dist.all_reduce(x)
    return {"backend": str(dist.get_backend()), "x": x}


def test_cpu_tcoll_cuda_nccl_is_accepted():
    # torch itself refuses to build its NCCL backend without a CUDA device ("nccl2 requires
    # at least one CUDA device"); there the same device map is proven with Gloo for CUDA
    backend = "cpu:tcoll,cuda:nccl" if torch.cuda.is_available() else "cpu:tcoll,cuda:gloo"
    if not torch.cuda.is_available():
        print("no CUDA device: testing", backend, "instead of cpu:tcoll,cuda:nccl")
    results = run_ranks(body_mixed_backends, 2, backend=backend)
    want = reference([make_input(q, 33, "float32", "SUM", 100) for q in range(2)],
                     "float32", "SUM")
    for r in range(2):
        assert "tcoll" in results[r]["backend"]
        check_close(results[r]["x"], want, "float32", "cpu:tcoll allreduce")


# ---------------------------------------------------------------------------------------
# bad input and faults: clear errors within the timeout, no hang, nothing left in /dev/shm

def body_mismatch(rank, size, kind):
    import torch.distributed as dist
    if kind == "count":
        x = torch.ones(1000 + rank * 7)
    elif kind == "sparse_size":
        x = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.ones(2, 3), (6 + rank, 3))
    else:
        x = torch.ones(1000, dtype=torch.float32 if rank == 0 else torch.float64)
    dist.all_reduce(x)
    return "no error"


def body_absent(rank, size):
    import torch.distributed as dist
    if rank == 1:
        return "stayed away"
    x = torch.ones(100)
    start = time.monotonic()
    try:
        dist.all_reduce(x)
    except RuntimeError as e:
        first = str(e)
    else:
        return "no error"
    elapsed = time.monotonic() - start
    again = time.monotonic()
    try:  # the group is broken now and says so at once
        dist.all_reduce(torch.ones(4))
    except RuntimeError as e:
        second = str(e)
    else:
        second = "no error"
    return {"first": first, "second": second, "elapsed": elapsed,
            "second_elapsed": time.monotonic() - again}


def tcoll_files_in_dev_shm():
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith("tcoll-"))


@pytest.mark.parametrize("kind", ["count", "dtype", "sparse_size"])
def test_mismatched_arguments_fail_within_the_timeout(kind):
    start = time.monotonic()
    _, errors = run_ranks(body_mismatch, 2, kind, timeout_s=5, deadline=60, allow_errors=True)
    assert errors, "a mismatch across ranks must fail"
    assert time.monotonic() - start < 45
    for text in errors.values():
        assert "rank" in text
    if kind == "sparse_size":
        # both ranks fail; the first to see the sizes names the rank, the dimension and both
        # sizes (its peer may be told of the abort first)
        assert len(errors) == 2
        assert any("rank 1's tensor has size 7 in dimension 0, rank 0's has 6" in text
                   for text in errors.values()), errors


def test_debug_detail_names_the_mismatched_argument():
    # TORCH_DISTRIBUTED_DEBUG=DETAIL: PyTorch wraps registered backends (tcoll is one) in its
    # ProcessGroupWrapper, which compares every call's op, shapes and dtypes across ranks
    # before it runs
    _, errors = run_ranks(body_mismatch, 2, "count", timeout_s=10, deadline=90,
                          allow_errors=True, env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    assert errors
    text = "\n".join(errors.values())
    assert "1000" in text and "1007" in text, text[-2000:]


def test_rank_that_never_calls_times_out_and_breaks_the_group():
    before = tcoll_files_in_dev_shm()
    results = run_ranks(body_absent, 2, timeout_s=5, deadline=60)
    res = results[0]
    assert isinstance(res, dict), res
    assert "peer 1" in res["first"] or "rank 1" in res["first"], res["first"]
    assert res["elapsed"] < 15, res["elapsed"]
    assert "broken by an earlier failure" in res["second"], res["second"]
    assert res["second_elapsed"] < 1, res["second_elapsed"]
    assert tcoll_files_in_dev_shm() == before


def body_killed(rank, size):
    import torch.distributed as dist
    x = torch.ones(10)
    dist.all_reduce(x)
    if rank == 1:
        os._exit(3)  # dies mid-job, no clean-up
    try:
        dist.all_reduce(torch.ones(100000))
    except RuntimeError as e:
        return str(e)
    return "no error"


def test_killed_rank_fails_its_peers_and_leaves_no_file():
    before = tcoll_files_in_dev_shm()
    results, errors = run_ranks(body_killed, 2, timeout_s=5, deadline=60, allow_errors=True)
    assert "exited with code 3" in errors[1]
    assert results[0] != "no error" and "1" in results[0], results[0]
    assert tcoll_files_in_dev_shm() == before


# ---------------------------------------------------------------------------------------
# real clients no one here wrote: torch.distributed's object collectives and an unmodified
# DistributedDataParallel, on "tcoll" and on "gloo", must agree

def body_ddp_and_objects(rank, size, steps):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    res = {}
    objs = [{"rank": rank, "name": f"r{rank}"}] if rank == 0 else [None]
    dist.broadcast_object_list(objs, src=0)
    res["broadcast_object_list"] = objs[0]
    gathered = [None] * size
    dist.all_gather_object(gathered, ("hello", rank, [rank] * rank))
    res["all_gather_object"] = gathered
    dist.barrier()

    torch.manual_seed(1234)  # the same initial model everywhere; DDP broadcasts rank 0's anyway
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))
    if rank != 0:  # prove DDP's construction-time broadcast: perturb the other ranks
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.5)
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(99 + rank)  # each rank its own fractional data
    for _ in range(steps):
        x = torch.randn(16, 20, generator=g)
        y = torch.randint(0, 5, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    res["params"] = [p.detach().clone() for p in model.parameters()]
    return res


def test_ddp_and_object_collectives_match_gloo():
    size, steps = 3, 5
    on_tcoll = run_ranks(body_ddp_and_objects, size, steps, backend="tcoll")
    on_gloo = run_ranks(body_ddp_and_objects, size, steps, backend="gloo")
    for r in range(size):
        assert on_tcoll[r]["broadcast_object_list"] == {"rank": 0, "name": "r0"}
        assert on_tcoll[r]["all_gather_object"] == [("hello", q, [q] * q) for q in range(size)]
        for p, (a, b) in enumerate(zip(on_tcoll[r]["params"], on_gloo[r]["params"])):
            # the same steps; sums of 3 fractional gradients may round differently in the two
            # backends' orders, amplified a little over 5 momentum steps
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), f"param {p} rank {r}"
            assert same_bits(a, on_tcoll[0]["params"][p]), f"param {p}: rank {r} differs from 0"


# ---------------------------------------------------------------------------------------
# init methods: env:// under torchrun, tcp://

def test_torchrun_env_init(tmp_path):
    import subprocess
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchrun_script.py")
    done = subprocess.run([torchrun, "--standalone", "--nproc-per-node=2", script,
                           str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    got = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    want = sum(torch.arange(1000, dtype=torch.float64) / 7 + r / 3 for r in range(2))
    for r in range(2):
        assert got[r]["rank"] == r and got[r]["size"] == 2
        assert torch.allclose(got[r]["x"], want, rtol=1e-15)
        assert same_bits(got[r]["x"], got[0]["x"])


def body_tcp(rank, size, port):
    import datetime
    import torch.distributed as dist
    dist.init_process_group("tcoll", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=30))
    x = make_input(rank, 100, "float32", "SUM", 110)
    dist.all_reduce(x)
    dist.destroy_process_group()
    return x


def test_tcp_init():
    import socket
    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = run_ranks(body_tcp, 2, port, init=False)
    want = reference([make_input(q, 100, "float32", "SUM", 110) for q in range(2)], "float32",
                     "SUM")
    for r in range(2):
        check_close(results[r], want, "float32", "tcp:// all_reduce")


# ---------------------------------------------------------------------------------------
# several nodes, emulated: each rank gets a host name of its own (a UTS namespace), so tcoll
# sees ranks on different nodes; shared memory inside a node, Gloo's send/recv across

def body_nodes(rank, size, cases, n):
    import torch.distributed as dist
    import tcoll_torch
    layout = tcoll_torch._C.layout_of(dist.group.WORLD._get_backend(torch.device("cpu")))
    out = {"layout": layout, "allreduce": body_allreduce(rank, size, cases),
           "collectives": body_collectives(rank, size, n),
           "internode": tcoll_torch._C.internode_of(
               dist.group.WORLD._get_backend(torch.device("cpu")))}
    # a straggler: the last rank comes 0.3 s late to a broadcast (Gloo's send/recv between
    # nodes) and an allreduce (the hierarchy's inter-node level). Its peers wait that long
    # in one transfer, which once failed ("Timed out waiting 50ms")
    x = torch.full((1000,), float(rank))
    y = make_input(rank, 5000, "float32", "SUM", 300)
    if rank == size - 1:
        time.sleep(0.3)
    dist.broadcast(x, src=size - 1)
    dist.all_reduce(y)
    out["straggler"] = (x, y)
    # tcoll_torch.DistributedDataParallel across the nodes (its buckets on the hierarchy)
    # against PyTorch's DDP on Gloo: integer-valued data for 2 steps (later steps leave the
    # range where float sums are exact in any order), then fractional data
    from test_ddp import body_compare
    out["ddp"] = (body_compare(rank, size, [7], ["optimal", "layerwise"], True, 2, {})
                  + body_compare(rank, size, [8], ["optimal"], False, 3, {}))
    return out


def nodes_cases():
    """The allreduce cases of the emulated-node tests."""
    return [c for c in allreduce_cases() if c[2] in (7, 70001) and c[0] in (
        "float32", "float64", "bfloat16", "int32", "bool")]


def run_on_nodes(body, hosts, *args):
    """Runs `body` on one rank per host name of `hosts` (emulated nodes: a UTS namespace
    each), skipping where namespaces cannot be made (not root); every rank's result."""
    results, errors = run_ranks(body, len(hosts), *args, hostnames=hosts, deadline=240,
                                allow_errors=True)
    if errors and all("SKIP" in e for e in errors.values()):
        pytest.skip("no UTS namespaces here (needs root): " + next(iter(errors.values())))
    assert not errors, errors
    return results


@pytest.mark.parametrize("hosts", [["a", "a", "b", "b"], ["a", "b", "a"]])
def test_emulated_nodes(hosts):
    cases = nodes_cases()
    results = run_on_nodes(body_nodes, hosts, cases, 257)
    check_nodes(results, hosts, cases)
    for r in range(len(hosts)):
        assert results[r]["internode"] == "gloo", results[r]["internode"]


def check_nodes(results, hosts, cases):
    """Checks body_nodes' results of every rank against references made here."""
    size = len(hosts)
    nodes = len(set(hosts))
    for r in range(size):
        node, n_nodes, local_rank, local_size, shards = results[r]["layout"]
        assert n_nodes == nodes and local_size == hosts.count(hosts[r]), results[r]["layout"]
        assert shards == min(hosts.count(h) for h in set(hosts))
    for k, (dtype_name, op, n, seed) in enumerate(cases):
        inputs = [make_input(r, n, dtype_name, op, seed) for r in range(size)]
        want = reference(inputs, dtype_name, op)
        for r in range(size):
            got = results[r]["allreduce"][k]
            check_close(got, want, dtype_name, f"{dtype_name} {op} n={n} hosts={hosts} rank {r}")
            assert same_bits(got, results[0]["allreduce"][k]), f"rank {r} differs"
    want = reference([make_input(r, 5000, "float32", "SUM", 300) for r in range(size)],
                     "float32", "SUM")
    for r in range(size):
        x, y = results[r]["straggler"]
        assert torch.equal(x, torch.full((1000,), float(size - 1))), f"straggler rank {r}"
        check_close(y, want, "float32", f"allreduce with a straggler, rank {r}")
        assert same_bits(y, results[0]["straggler"][1])
    for r in range(size):
        for k, case in enumerate(results[r]["ddp"]):
            label = f"DDP across nodes, rank {r}, case {k} (planner {case['planner']})"
            for i, (a, b) in enumerate(zip(case["ours"], case["theirs"])):
                assert same_bits(a, results[0]["ddp"][k]["ours"][i]), f"{label}: param {i}"
                # integer-valued data: exactly PyTorch's DDP on Gloo where the average is
                # exact (a power-of-two rank count; Gloo's DDP divides before it sums)
                if k < 2 and size & (size - 1) == 0:
                    assert same_bits(a, b), f"{label}: parameter {i} differs from DDP on Gloo"
                else:  # within the reassociation bound, relative to the tensor's scale
                    err = (a - b).abs().max().item()
                    assert err <= 1e-5 * b.abs().max().item(), f"{label}: param {i} off by {err}"
    n = 257
    xs = [make_input(r, n, "float32", "SUM", 7) for r in range(size)]
    for r in range(size):
        res = results[r]["collectives"]
        assert torch.equal(res["all_gather_into_tensor"], torch.cat(xs))
        assert torch.equal(res["ring_recv"], xs[(r - 1) % size])
        for root in range(size):
            assert torch.equal(res[f"broadcast{root}"], make_input(root, n, "int32", "SUM",
                                                                   9 + root))


def body_internode_choice(rank, size):
    import torch.distributed as dist
    import tcoll_torch
    out = []
    # TCOLL_TORCH_INTERNODE=mpi where no MPI launcher started the processes; then values
    # that differ across ranks; each must fail on every rank, naming the rank and why
    for value in (["mpi"] * size, ["gloo"] + ["auto"] * (size - 1)):
        os.environ["TCOLL_TORCH_INTERNODE"] = value[rank]
        try:
            dist.new_group(list(range(size)), backend="tcoll")
            out.append("no error")
        except Exception as e:  # noqa: BLE001  the message is the result
            out.append(str(e))
    del os.environ["TCOLL_TORCH_INTERNODE"]  # auto: Gloo here, and the group works
    g = dist.new_group(list(range(size)), backend="tcoll")
    x = torch.full((5,), float(rank + 1))
    dist.all_reduce(x, group=g)
    out.append((tcoll_torch._C.internode_of(g._get_backend(torch.device("cpu"))), x))
    return out


def test_internode_choice_errors_name_the_rank():
    results, errors = run_ranks(body_internode_choice, 3, hostnames=["a", "a", "b"],
                                allow_errors=True)
    if errors and all("SKIP" in e for e in errors.values()):
        pytest.skip("no UTS namespaces here (needs root)")
    assert not errors, errors
    for r in range(3):
        no_launcher, differ, (engine, x) = results[r]
        assert ("TCOLL_TORCH_INTERNODE=mpi, but rank 0 cannot use MPI: not started by an MPI "
                "launcher") in no_launcher or "built without MPI" in no_launcher, no_launcher
        assert f"rank {r}" in no_launcher, no_launcher
        if r > 0:
            assert 'TCOLL_TORCH_INTERNODE is "auto" here but "gloo" on rank 0' in differ, differ
        else:
            assert 'is "gloo" here but "auto" on rank 1' in differ, differ
        assert engine == "gloo" and torch.equal(x, torch.full((5,), 6.0)), (engine, x)


def tcoll_torch_C():
    """The backend's extension module, imported in this (the test's) process."""
    from harness import PYTHON_DIR
    if PYTHON_DIR not in sys.path:
        sys.path.insert(0, PYTHON_DIR)
    import tcoll_torch
    return tcoll_torch._C


def mpirun():
    """Open MPI's launcher (the MPI setup.py builds the backend with), or None."""
    import shutil
    return shutil.which("mpirun.openmpi") or shutil.which("mpirun")


def uneven_rows(src, dst):
    """Rows rank `src` sends rank `dst` in the uneven all_to_all_single cases: 0 to 4, some
    pairs none."""
    return (2 * src + 3 * dst + 1) % 5


def all_to_all_uneven_blocks(rank, size, cols=3):
    """all_to_all_single with split sizes of every pair its own, asynchronous; the output
    and whether the input stayed as it was."""
    import torch.distributed as dist
    in_splits = [uneven_rows(rank, q) for q in range(size)]
    out_splits = [uneven_rows(q, rank) for q in range(size)]
    x = torch.cat([alltoall_block(rank, q, in_splits[q], cols) for q in range(size)])
    kept = x.clone()
    y = torch.full((sum(out_splits), cols), -1.0)
    dist.all_to_all_single(y, x, out_splits, in_splits, async_op=True).wait()
    return y, torch.equal(x, kept)


def want_uneven_blocks(rank, size, cols=3):
    return torch.cat([alltoall_block(q, rank, uneven_rows(q, rank), cols) for q in range(size)])


def body_all_to_all_hierarchical(rank, size):
    import torch.distributed as dist
    import tcoll_torch
    # read once per process, at the first all_to_all_single of its kind: without split
    # sizes the rule of the equal blocks, with them (even ones too) the uneven form's
    os.environ["TCOLL_ALLTOALL_ALGO"] = "hierarchical:0-max"
    os.environ["TCOLL_ALLTOALLV_ALGO"] = "hierarchical:0-max"
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    before = tcoll_torch._C.machine_calls(backend)
    res = all_to_all_equal_blocks(rank, size)
    res["uneven"], res["uneven_input"] = all_to_all_uneven_blocks(rank, size)
    # blocks from 256 KiB: through the peers each crosses the nodes as a message of its own
    # (via_peers::each_block_across_from_bytes), in both forms
    x = torch.cat([big_block(rank, q, BIG_ROWS) for q in range(size)])
    res["big"] = torch.full_like(x, -1.0)
    dist.all_to_all_single(res["big"], x)
    in_splits = [BIG_ROWS + uneven_rows(rank, q) for q in range(size)]
    out_splits = [BIG_ROWS + uneven_rows(q, rank) for q in range(size)]
    x = torch.cat([big_block(rank, q, in_splits[q]) for q in range(size)])
    res["big_uneven"] = torch.full((sum(out_splits),), -1.0)
    dist.all_to_all_single(res["big_uneven"], x, out_splits, in_splits)
    res["machine_calls"] = tcoll_torch._C.machine_calls(backend) - before
    return res


BIG_ROWS = 65536  # float32: 256 KiB


def big_block(src, dst, rows):
    """The block rank `src` sends rank `dst` in the large all_to_all_single cases: fractional,
    exact in float32."""
    return torch.arange(rows, dtype=torch.float32) * 0.25 + src * 8 + dst


@pytest.mark.parametrize("hosts", [["a", "a", "b", "b"], ["a", "b", "a"]])
def test_all_to_all_single_on_the_machine_across_nodes(hosts):
    # a TCOLL_ALLTOALL_ALGO rule naming `hierarchical` runs all_to_all_single on the two-level
    # machine, and a TCOLL_ALLTOALLV_ALGO one the calls with split sizes: through the peers
    # on nodes of 2 and 2, through the leaders on 2 and 1
    results = run_on_nodes(body_all_to_all_hierarchical, hosts)
    size = len(hosts)
    for r in range(size):
        for k, (rows, cols, _) in enumerate(BRUCK_SHAPES):
            want = torch.cat([alltoall_block(q, r, rows, cols) for q in range(size)])
            assert torch.equal(results[r][k], want), f"rank {r}, blocks of {rows}x{cols}"
            assert results[r][f"input{k}"], f"rank {r}: the input of case {k} changed"
        assert torch.equal(results[r]["uneven"], want_uneven_blocks(r, size)), r
        assert results[r]["uneven_input"], f"rank {r}: the uneven call's input changed"
        want = torch.cat([big_block(q, r, BIG_ROWS) for q in range(size)])
        assert torch.equal(results[r]["big"], want), f"rank {r}: blocks of 256 KiB"
        want = torch.cat([big_block(q, r, BIG_ROWS + uneven_rows(q, r)) for q in range(size)])
        assert torch.equal(results[r]["big_uneven"], want), f"rank {r}: uneven blocks from 256 KiB"
        assert results[r]["machine_calls"] == len(BRUCK_SHAPES) + 3, results[r]["machine_calls"]


def machine_value(rank, n, salt):
    """Fractional values of rank `rank` for the collectives on the machine (case `salt`)."""
    return torch.arange(n, dtype=torch.float32) * 0.37 + rank * 1.125 + salt * 0.0625


MACHINE_RULES = ("BCAST", "REDUCE", "ALLGATHER", "REDUCE_SCATTER", "GATHER", "SCATTER",
                 "ALLTOALLV", "BARRIER")


def body_every_collective_on_the_machine(rank, size):
    import torch.distributed as dist
    import tcoll_torch
    # read once per process, at the first call of each collective
    for name in MACHINE_RULES:
        os.environ[f"TCOLL_{name}_ALGO"] = "hierarchical:0-max"
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    before = tcoll_torch._C.machine_calls(backend)
    n, root, res = 1003, size - 1, {}
    x = machine_value(rank, n, 1)
    dist.broadcast(x, src=root)
    res["broadcast"] = x
    big = machine_value(rank, 40000, 2)  # 160 KiB: queued on the machine's engine
    dist.broadcast(big, src=0, async_op=True).wait()
    res["broadcast_queued"] = big
    x = machine_value(rank, n, 3)
    dist.reduce(x, dst=1 % size)
    res["reduce"] = x
    out = torch.empty(size * n)
    dist.all_gather_into_tensor(out, machine_value(rank, n, 4))
    res["all_gather_into_tensor"] = out
    outs = [torch.empty(n) for _ in range(size)]
    dist.all_gather(outs, machine_value(rank, n, 5))
    res["all_gather"] = torch.cat(outs)
    out = torch.empty(n)
    dist.reduce_scatter_tensor(out, machine_value(rank, size * n, 6))
    res["reduce_scatter_tensor"] = out
    out = torch.empty(n)
    dist.reduce_scatter(out, list(machine_value(rank, size * n, 7).chunk(size)))
    res["reduce_scatter"] = out
    # blocks of their own sizes (every rank passes every block's size): reduce_scatterv
    sizes = [n + 7 * q for q in range(size)]
    out = torch.empty(sizes[rank])
    dist.reduce_scatter(out, list(machine_value(rank, sum(sizes), 10).split(sizes)))
    res["reduce_scatter_uneven"] = out
    gathered = [torch.empty(n) for _ in range(size)] if rank == 0 else None
    dist.gather(machine_value(rank, n, 8), gathered, dst=0)
    res["gather"] = torch.cat(gathered) if rank == 0 else None
    out = torch.empty(n)
    dist.scatter(out, [machine_value(q, n, 9) for q in range(size)] if rank == root else None,
                 src=root)
    res["scatter"] = out
    ins = [alltoall_block(rank, q, uneven_rows(rank, q), 3) for q in range(size)]
    kept = [t.clone() for t in ins]
    outs = [torch.full((uneven_rows(q, rank), 3), -1.0) for q in range(size)]
    dist.all_to_all(outs, ins)
    res["all_to_all"] = torch.cat(outs)
    res["all_to_all_input"] = all(torch.equal(a, b) for a, b in zip(ins, kept))
    dist.barrier()
    res["machine_calls"] = tcoll_torch._C.machine_calls(backend) - before
    return res


@pytest.mark.parametrize("hosts", [["a", "a", "b", "b"], ["a", "b", "a"]])
def test_every_collective_on_the_machine_across_nodes_by_rule(hosts):
    # a TCOLL_<collective>_ALGO rule naming `hierarchical` runs broadcast, reduce, the
    # allgathers, the reduce-scatters (uneven blocks too), gather, scatter, all_to_all
    # (lists) and barrier on the two-level machine, as under the preload
    results = run_on_nodes(body_every_collective_on_the_machine, hosts)
    size, n, root = len(hosts), 1003, len(hosts) - 1
    f64 = torch.float64

    def summed(salt, length):
        return sum(machine_value(r, length, salt).to(f64) for r in range(size))

    def close(got, want, what):
        assert torch.allclose(got.to(f64), want, rtol=1e-6, atol=1e-4), what

    for r in range(size):
        what = f"rank {r} of {hosts}"
        assert torch.equal(results[r]["broadcast"], machine_value(root, n, 1)), what
        assert torch.equal(results[r]["broadcast_queued"], machine_value(0, 40000, 2)), what
        if r == 1 % size:
            close(results[r]["reduce"], summed(3, n), what + ": reduce")
        gathered = [torch.cat([machine_value(q, n, salt) for q in range(size)]) for salt in (4, 5)]
        assert torch.equal(results[r]["all_gather_into_tensor"], gathered[0]), what
        assert torch.equal(results[r]["all_gather"], gathered[1]), what
        for key, salt in (("reduce_scatter_tensor", 6), ("reduce_scatter", 7)):
            close(results[r][key], summed(salt, size * n)[r * n:(r + 1) * n], f"{what}: {key}")
        sizes = [n + 7 * q for q in range(size)]
        start = sum(sizes[:r])
        close(results[r]["reduce_scatter_uneven"],
              summed(10, sum(sizes))[start:start + sizes[r]], f"{what}: uneven reduce_scatter")
        if r == 0:
            assert torch.equal(results[r]["gather"],
                               torch.cat([machine_value(q, n, 8) for q in range(size)])), what
        assert torch.equal(results[r]["scatter"], machine_value(r, n, 9)), what
        want = torch.cat([alltoall_block(q, r, uneven_rows(q, r), 3) for q in range(size)])
        assert torch.equal(results[r]["all_to_all"], want), what
        assert results[r]["all_to_all_input"], what
        assert results[r]["machine_calls"] == 12, (what, results[r]["machine_calls"])


def body_all_to_all_splits_even_on_one_rank(rank, size):
    import torch.distributed as dist
    os.environ.pop("TCOLL_ALLTOALL_ALGO", None)
    # rank 0 sends and receives 3 rows per peer, rank 1 sends itself 5: rank 0's splits are
    # even, rank 1's are not, and both must take the same path (before, rank 0 chose the
    # collective area by its own even blocks and rank 1 the exchange: a 30 s timeout)
    splits = [[3, 3], [3, 5]][rank]
    x = torch.cat([alltoall_block(rank, q, splits[q], 1) for q in range(size)])
    y = torch.full((sum(splits), 1), -1.0)
    start = time.monotonic()
    dist.all_to_all_single(y, x, splits, splits)
    return y, time.monotonic() - start


def test_all_to_all_single_with_split_sizes_even_on_one_rank_only():
    results = run_ranks(body_all_to_all_splits_even_on_one_rank, 2)
    rows = [[3, 3], [3, 5]]
    for r in range(2):
        y, seconds = results[r]
        want = torch.cat([alltoall_block(q, r, rows[q][r], 1) for q in range(2)])
        assert torch.equal(y, want), r
        assert seconds < 10, seconds


@pytest.mark.skipif(not tcoll_torch_C().built_with_mpi, reason="backend built without MPI")
@pytest.mark.skipif(mpirun() is None, reason="no mpirun")
def test_emulated_nodes_over_mpi(tmp_path):
    # under mpirun the messages between nodes travel over MPI (mpi_transport), the rest as
    # in test_emulated_nodes; a sub-group across both nodes gets a communicator of its own
    # (MPI_Comm_create_group over its ranks only), a stalled rank makes its peers raise
    # within the group's timeout, and the processes exit cleanly through tcoll's
    # MPI_Finalize (mpirun fails the job otherwise)
    import subprocess
    hosts = ["a", "a", "b", "b"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_op="^avx")  # MPI is not the reference here; no AVX int8 saturation
    env.pop("TCOLL_TORCH_INTERNODE", None)
    cmd = [mpirun(), "--allow-run-as-root", "--oversubscribe", "-np", str(len(hosts)),
           "--mca", "btl", "self,vader,tcp", "--mca", "btl_vader_single_copy_mechanism",
           "none", sys.executable, os.path.join(os.path.dirname(__file__), "mpi_ranks.py"),
           str(tmp_path), str(tmp_path / "store"), *hosts]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    if any(tmp_path.glob("skip*")):
        pytest.skip("no UTS namespaces here (needs root)")
    assert done.returncode == 0, done.stdout + done.stderr
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(len(hosts))]
    check_nodes(results, hosts, nodes_cases())
    members = [0, 2, 3]
    want = reference([make_input(r, 3001, "float32", "SUM", 41) for r in members], "float32",
                     "SUM")
    for r in range(len(hosts)):
        assert results[r]["internode"] == "mpi", results[r]["internode"]
        if r in members:
            engine, y = results[r]["sub"]
            assert engine == "mpi", engine
            check_close(y, want, "float32", f"sub-group allreduce over MPI, rank {r}")
            assert same_bits(y, results[0]["sub"][1]), f"rank {r} differs"
        else:
            assert "sub" not in results[r]
    assert results[-1]["stall"] == "stalled"
    for r in range(len(hosts) - 1):
        took, error = results[r]["stall"]
        assert "timed out after 2000 ms" in error or "aborted" in error, error
        assert 1.5 < took < 10, (r, took, error)
        # errors name group ranks, not the ranks inside a node or across nodes: rank 2 is
        # local rank 0 of node b, whose only peer there is rank 3
        assert f"[rank {r}]" in error, (r, error)
        if r == 2 and "timed out" in error:
            assert "[peer 3]" in error, error
        assert "broken by an earlier failure" in results[r]["broken"], results[r]["broken"]
        assert f"[rank {r}]" in results[r]["broken"], results[r]["broken"]


def body_calls_on_both_engines_keep_their_order(rank, size):
    import torch.distributed as dist
    # across nodes an all_reduce runs on the group's two-level machine (its engine) and a
    # broadcast between all ranks (another engine): a broadcast made after a queued
    # all_reduce of the same tensor must see its result, whichever engine runs which
    n = 1 << 20  # 4 MiB: above the inline bound, so the all_reduce is queued
    got = []
    for it in range(4):
        x = torch.full((n,), 0.25 * (rank + 1) + 0.125 * it)
        w = dist.all_reduce(x, async_op=True)
        if it % 2:
            dist.broadcast(x, src=size - 1, async_op=True).wait()
        else:
            dist.broadcast(x, src=size - 1)
        w.wait()
        got.append((x.min().item(), x.max().item()))
        # and the other way round: a queued broadcast, then an all_reduce of its tensor
        y = torch.full((n,), 0.25 * (rank + 1) + 0.125 * it)
        w = dist.broadcast(y, src=size - 1, async_op=True)
        if it % 2:
            dist.all_reduce(y, async_op=True).wait()
        else:
            dist.all_reduce(y)
        w.wait()
        got.append((y.min().item(), y.max().item()))
    # a callback on the transport's engine thread makes a blocking all_reduce, which queues
    # on the machine's engine behind another all_reduce, while a broadcast is queued behind
    # the callback on the transport's engine: the callback runs that broadcast first
    a = torch.full((8 << 20,), float(rank))  # 32 MiB: still running when the rest is made
    m = torch.full((8 << 20,), float(rank))
    b = torch.full((n,), float(rank))
    z = torch.full((n,), 0.5 * (rank + 1))

    def reduce_z(_):
        dist.all_reduce(z)
        return z

    fut = dist.broadcast(a, src=0, async_op=True).get_future().then(reduce_z)
    w_m = dist.all_reduce(m, async_op=True)
    w_b = dist.broadcast(b, src=size - 1, async_op=True)
    fut.wait()
    w_m.wait()
    w_b.wait()
    got.append((z.min().item(), z.max().item(), b.min().item(), b.max().item(),
                m.min().item(), m.max().item()))
    return got


@pytest.mark.parametrize("hosts", [["a", "a", "b", "b"]])
def test_calls_on_both_engines_keep_their_order(hosts):
    results = run_on_nodes(body_calls_on_both_engines_keep_their_order, hosts)
    size = len(hosts)
    for it in range(4):
        reduced = sum(0.25 * (r + 1) + 0.125 * it for r in range(size))
        root_value = 0.25 * size + 0.125 * it
        for r in range(size):
            assert results[r][2 * it] == (reduced, reduced), (r, it, results[r][2 * it])
            want = root_value * size
            assert results[r][2 * it + 1] == (want, want), (r, it, results[r][2 * it + 1])
    z = sum(0.5 * (r + 1) for r in range(size))
    for r in range(size):
        m = size * (size - 1) / 2
        assert results[r][8] == (z, z, size - 1, size - 1, m, m), (
            r, results[r][8])
