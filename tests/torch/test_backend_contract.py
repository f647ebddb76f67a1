"""The "tcoll" backend keeps ProcessGroupGloo's semantics where tcoll once differed (issue 50):
a barrier orders with every earlier call of the group, and a callback chained on a call's
future may start and wait for further collectives of the same group at any size.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_ranks  # noqa: E402

BIG = 1 << 20  # elements: 4 MiB of float32, far above the 64 KiB that run in the caller


def body_barrier_orders(rank, size):
    import torch.distributed as dist

    completed = []
    for k in range(6):
        big = torch.full((BIG,), float(rank + k))
        work = dist.all_reduce(big, async_op=True)
        dist.barrier()
        completed.append(work.is_completed())
        work.wait()
        assert big[0].item() == sum(r + k for r in range(size))
    # an asynchronous barrier is ordered the same way: when it is done, so is the call
    big = torch.ones(BIG)
    work = dist.all_reduce(big, async_op=True)
    dist.barrier(async_op=True).wait()
    completed.append(work.is_completed())
    return completed


def test_barrier_waits_for_earlier_asynchronous_calls():
    for rank, completed in enumerate(run_ranks(body_barrier_orders, 2)):
        assert all(completed), f"rank {rank}: call not complete after the barrier: {completed}"


def body_nested_callbacks(rank, size):
    import torch.distributed as dist

    a = torch.full((BIG,), 0.25 * (rank + 1))
    b = torch.full((BIG,), 0.5 * (rank + 1))
    c = torch.full((300,), 1.0 * (rank + 1))

    # PowerSGD's pattern: a callback starts a collective of the same group and waits for it
    def then_reduce_b(fut):
        first = fut.value()[0]
        second = dist.all_reduce(b, async_op=True).get_future().wait()[0]
        return first[0].item() + second[0].item()

    nested = dist.all_reduce(a, async_op=True).get_future().then(then_reduce_b)
    # (a collective started in a callback is ordered by when the callback runs: the main
    # thread starts none until that one is done, so every rank starts them in one order)
    nested_result = nested.wait()
    # a callback that waits for a call queued after the one it is chained on
    d = torch.full((BIG,), 2.0 * (rank + 1))
    w1 = dist.all_reduce(torch.ones(BIG), async_op=True)
    w2 = dist.all_reduce(d, async_op=True)
    waited = w1.get_future().then(lambda fut: (w2.wait(), d[0].item())[1]).wait()
    # and a small one started from a callback
    small = dist.all_reduce(torch.ones(BIG), async_op=True).get_future().then(
        lambda fut: (dist.all_reduce(c), c[0].item())[1])
    return nested_result, waited, small.wait()


def test_callbacks_may_wait_for_collectives_of_their_group():
    size = 2
    results = run_ranks(body_nested_callbacks, size, timeout_s=10, deadline=60)
    ranks = sum(r + 1 for r in range(size))
    for rank, (nested, waited, small) in enumerate(results):
        assert nested == 0.25 * ranks + 0.5 * ranks, (rank, nested)
        assert waited == 2.0 * ranks, (rank, waited)
        assert small == 1.0 * ranks, (rank, small)


def body_collectives_gloo_has(rank, size):
    """Each call on a tcoll group and on a Gloo group, side by side."""
    import torch.distributed as dist

    gloo = dist.new_group(backend="gloo")
    out = {}
    for name, group in (("tcoll", None), ("gloo", gloo)):
        res = {}
        # all_to_all (lists)
        inputs = [torch.arange(2, dtype=torch.float64) + 0.5 * rank + q for q in range(size)]
        outputs = [torch.empty(2, dtype=torch.float64) for q in range(size)]
        dist.all_to_all(outputs, inputs, group=group)
        res["all_to_all"] = outputs
        if name == "tcoll":  # blocks of a different size for every pair (Gloo refuses them)
            inputs = [torch.arange(q + rank + 1, dtype=torch.float64) + 0.5 * rank
                      for q in range(size)]
            outputs = [torch.empty(rank + q + 1, dtype=torch.float64) for q in range(size)]
            dist.all_to_all(outputs, inputs, group=group)
            res["uneven"] = outputs
        # all_gather_coalesced
        ins = [torch.full((3,), 0.25 * rank), torch.arange(5.0) * (rank + 1)]
        outs = [[torch.empty(3), torch.empty(5)] for _ in range(size)]  # per rank, per input
        dist.all_gather_coalesced(outs, ins, group=group)
        res["all_gather_coalesced"] = outs
        # complex reduce and reduce_scatter_tensor
        z = torch.complex(torch.arange(4.0) * 0.5 + rank, torch.full((4,), 0.25 * rank))
        dist.reduce(z, dst=0, group=group)
        res["reduce_complex"] = z if rank == 0 else None
        zin = torch.complex(torch.arange(2.0 * size) * 0.5, torch.full((2 * size,), 0.5 * rank))
        zout = torch.empty(2, dtype=torch.complex64)
        dist.reduce_scatter_tensor(zout, zin, group=group)
        res["reduce_scatter_complex"] = zout
        # reduce_scatter (list) with a block of its own size for every rank
        rs_in = [torch.arange(q + 1.0) * 0.5 + rank for q in range(size)]
        rs_out = torch.empty(rank + 1)
        dist.reduce_scatter(rs_out, rs_in, group=group)
        res["reduce_scatter_uneven"] = rs_out
        # two asynchronous SUMs in a row on a transposed tensor: the second sees the first
        t = (torch.arange(6.0).reshape(2, 3) + rank).t()
        works = [dist.all_reduce(t, async_op=True, group=group) for _ in range(2)]
        for w in works:
            w.wait()
        res["transposed"] = t.clone()
        # a batch that fails (a peer outside the group) leaves the next batch working
        try:
            dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.ones(1), size + 3, group=group)])
            res["bad_batch"] = "no error"
        except Exception as e:  # noqa: BLE001
            res["bad_batch"] = type(e).__name__
        peer = (rank + 1) % size
        got = torch.zeros(2)
        ops = [dist.P2POp(dist.isend, torch.full((2,), float(rank)), peer, group=group),
               dist.P2POp(dist.irecv, got, (rank - 1) % size, group=group)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        res["good_batch"] = got
        # tags beyond the 1024 tcoll once allowed, and two tags in flight between one pair
        high = [torch.zeros(3), torch.zeros(3)]
        recvs = [dist.irecv(high[k], (rank - 1) % size, group=group, tag=tag)
                 for k, tag in enumerate((1 << 30, 5000))]
        sends = [dist.isend(torch.full((3,), rank + 0.5 * k), peer, group=group, tag=tag)
                 for k, tag in enumerate((5000, 1 << 30))]
        for w in recvs + sends:
            w.wait()
        res["high_tags"] = high
        out[name] = res
    return out


def test_collectives_as_gloo_gives_them():
    size = 3
    for rank, out in enumerate(run_ranks(body_collectives_gloo_has, size, deadline=90)):
        ours, theirs = out["tcoll"], out["gloo"]
        assert ours["bad_batch"] != "no error" and theirs["bad_batch"] != "no error"
        for key in ("all_to_all", "all_gather_coalesced", "reduce_complex",
                    "reduce_scatter_complex", "reduce_scatter_uneven", "good_batch",
                    "high_tags"):
            a, b = ours[key], theirs[key]
            flat_a = a if isinstance(a, list) else [a]
            flat_b = b if isinstance(b, list) else [b]
            for x, y in zip(flat_a, flat_b):
                for u, v in zip(x if isinstance(x, list) else [x], y if isinstance(y, list) else [y]):
                    assert (u is None) == (v is None), (rank, key)
                    if u is not None:
                        assert u.dtype == v.dtype and torch.equal(u, v), (rank, key, u, v)
        # and by hand: rank r receives from q a block of r + q + 1 elements
        for q, block in enumerate(ours["uneven"]):
            assert torch.equal(block, torch.arange(rank + q + 1, dtype=torch.float64) + 0.5 * q)
        left = (rank - 1) % size  # its tag 2^30 send is its second (0.5), tag 5000 its first
        assert torch.equal(ours["high_tags"][0], torch.full((3,), left + 0.5))
        assert torch.equal(ours["high_tags"][1], torch.full((3,), float(left)))
        assert torch.equal(ours["reduce_scatter_uneven"],
                           size * torch.arange(rank + 1.0) * 0.5 + sum(range(size)))
        # the second SUM reduces the first one's result (Gloo's gives a mix of partial sums
        # here: it copies the tensor when the call is made)
        x = torch.arange(6.0).reshape(2, 3).t()
        first = size * x + sum(range(size))
        assert torch.equal(ours["transposed"], size * first), ours["transposed"]


def body_monitored_barrier(rank, size, absent, wait_all):
    import datetime

    import torch.distributed as dist

    dist.monitored_barrier(timeout=datetime.timedelta(seconds=5))  # all arrive: passes
    if rank in absent:
        import time
        time.sleep(4)
        return "absent"
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=1), wait_all_ranks=wait_all)
        return "passed"
    except RuntimeError as e:
        return str(e)


def test_monitored_barrier_names_the_ranks_that_did_not_arrive():
    import time
    start = time.monotonic()
    results = run_ranks(body_monitored_barrier, 4, [2], False, timeout_s=10, deadline=60)
    assert "[Rank 0]: Rank 2 failed to pass monitoredBarrier in 1000 ms" in results[0], results
    for r in (1, 3):
        assert "successfully reached monitoredBarrier" in results[r], results[r]
    results = run_ranks(body_monitored_barrier, 4, [1, 3], True, timeout_s=10, deadline=60)
    assert "[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 1000 ms" in results[0], results
    assert time.monotonic() - start < 45


def body_group_creation_lets_go_of_the_gil(rank, size):
    import threading
    import time

    import torch.distributed as dist

    if rank == 1:  # sums with rank 0's thread first, makes the new group only then
        for _ in range(20):
            dist.all_reduce(torch.ones(4))
        dist.new_group(backend="tcoll")
        return "ok"
    done = []

    def sums():  # needs the GIL while the main thread waits in new_group for rank 1
        for _ in range(20):
            dist.all_reduce(torch.ones(4))
        done.append(time.monotonic())

    thread = threading.Thread(target=sums)
    thread.start()
    time.sleep(0.2)
    dist.new_group(backend="tcoll")
    thread.join()
    return "ok"


def test_group_creation_lets_other_threads_run():
    # with the GIL held while rank 0 waits in new_group, its other thread's allreduces
    # cannot run, so rank 1 never reaches new_group: both time out
    results = run_ranks(body_group_creation_lets_go_of_the_gil, 2, timeout_s=8, deadline=40)
    assert results == ["ok", "ok"]


def body_sends_progress(rank, size):
    import torch.distributed as dist

    other = dist.new_group(backend="tcoll")
    n = 1 << 18  # 1 MiB each, more than the transport's slots hold
    if rank == 0:
        works = [dist.isend(torch.full((n,), float(k)), 1) for k in range(8)]
        dist.all_reduce(torch.ones(4), group=other)  # blocks here until rank 1 joins
        for w in works:
            w.wait()
        return "sent"
    got = [torch.zeros(n) for _ in range(8)]
    for w in [dist.irecv(g, 0) for g in got]:
        w.wait()  # needs rank 0's sends to progress while rank 0 waits in the other group
    dist.all_reduce(torch.ones(4), group=other)
    return [g[0].item() for g in got]


def test_posted_sends_complete_whatever_the_sender_does_next():
    results = run_ranks(body_sends_progress, 2, timeout_s=8, deadline=40)
    assert results == ["sent", [float(k) for k in range(8)]]


def body_any_source_and_any_tag(rank, size):
    """Receives without a source and tags of any non-negative int, on tcoll and on Gloo side
    by side."""
    import datetime
    import time

    import torch.distributed as dist

    gloo = dist.new_group(backend="gloo")
    out = {}
    for name, group in (("tcoll", None), ("gloo", gloo)):
        res = {}
        if rank == 0:
            # every other rank sends two messages of tag 7: four receives of any source,
            # posted before any is waited on, take each once and one sender's in its order
            got = [torch.zeros(2) for _ in range(2 * (size - 1))]
            works = [dist.irecv(g, group=group, tag=7) for g in got]
            for w in works:
                w.wait()
            res["any"] = [(w._source_rank(), g.tolist()) for w, g in zip(works, got)]
            # a blocking recv without a source returns the sender; of the two tags waiting
            # from rank 1 it takes the one asked for; any non-negative int is a tag
            blocking = torch.zeros(3)
            res["sender"] = dist.recv(blocking, group=group, tag=1024)
            res["first_high"] = blocking.tolist()
            other = torch.zeros(3)
            dist.recv(other, 1, group=group, tag=(1 << 31) - 1)
            res["highest"] = other.tolist()
            try:
                dist.isend(torch.ones(1), 1, group=group, tag=-1)
                res["negative"] = "no error"
            except RuntimeError as e:
                res["negative"] = str(e)
        else:
            for k in range(2):
                dist.send(torch.tensor([float(rank), float(k)]), 0, group=group, tag=7)
            if rank == 1:
                # (not blocking sends: Gloo's wait for the receive, which asks in the other
                # order)
                for w in [dist.isend(torch.full((3,), -0.5), 0, group=group, tag=(1 << 31) - 1),
                          dist.isend(torch.full((3,), 2.5), 0, group=group, tag=1024)]:
                    w.wait()
        dist.barrier(group=group)
        if rank == 0:
            # nobody sends tag 99: the wait ends at its timeout with an error (last: on Gloo
            # the timeout closes the group's connections)
            start = time.monotonic()
            try:
                dist.irecv(torch.zeros(1), group=group, tag=99).wait(
                    datetime.timedelta(seconds=1))
                res["unsent"] = "no error"
            except RuntimeError as e:
                res["unsent"] = str(e)
            res["unsent_seconds"] = time.monotonic() - start
        out[name] = res
    return out


def test_receives_from_any_source_and_tags_of_any_non_negative_int():
    size = 3
    results = run_ranks(body_any_source_and_any_tag, size, timeout_s=20, deadline=90)
    for name in ("tcoll", "gloo"):
        res = results[0][name]
        pairs = res["any"]
        assert sorted((src, tuple(v)) for src, v in pairs) == \
            [(q, (float(q), float(k))) for q in range(1, size) for k in range(2)], (name, pairs)
        for q in range(1, size):  # one sender's messages arrive in the order it sent them
            assert [v[1] for src, v in pairs if src == q] == [0.0, 1.0], (name, pairs)
        assert res["sender"] == 1 and res["first_high"] == [2.5] * 3, (name, res)
        assert res["highest"] == [-0.5] * 3, (name, res)
        assert "negative" in res["negative"].lower(), (name, res)
        assert res["unsent"] != "no error" and res["unsent_seconds"] < 10, (name, res)
    assert "any source" in results[0]["tcoll"]["unsent"], results[0]["tcoll"]["unsent"]


def body_split_group(rank, size):
    """dist.split_group of a tcoll group and of a Gloo group, side by side."""
    import torch.distributed as dist

    gloo = dist.new_group(backend="gloo")
    out = {}
    for name, parent in (("tcoll", dist.group.WORLD), ("gloo", gloo)):
        res = {}
        # two splits, the second in an order of its own; every rank is in one
        g = dist.split_group(parent, split_ranks=[[2, 0], [1]])
        res["backend"] = g._get_backend(torch.device("cpu")).name()
        res["rank"], res["size"] = g.rank(), g.size()
        x = torch.arange(5.0) * 0.1 + 0.3 * rank
        dist.all_reduce(x, group=g)
        res["sum"] = x.tolist()
        y = torch.full((3,), 0.25 + rank)
        dist.broadcast(y, group_src=0, group=g)
        res["bcast"] = y.tolist()
        # a split that leaves rank 1 out
        h = dist.split_group(parent, split_ranks=[[0, 2]])
        res["member"] = h is not dist.GroupMember.NON_GROUP_MEMBER
        if res["member"]:
            z = torch.full((2,), 0.7 * (rank + 1))
            dist.all_reduce(z, group=h)
            res["left_out_sum"] = z.tolist()
        dist.barrier(group=parent)
        out[name] = res
    return out


def test_split_group_as_gloo_splits():
    results = run_ranks(body_split_group, 3, deadline=90)
    for rank, out in enumerate(results):
        ours, theirs = out["tcoll"], out["gloo"]
        assert ours["backend"] == "tcoll" and theirs["backend"] == "gloo", (rank, out)
        for key in ("rank", "size", "sum", "bcast", "member", "left_out_sum"):
            assert ours.get(key) == theirs.get(key), (rank, key, ours, theirs)
        # and by hand: ranks 2 and 0 together (group ranks 0 and 1), rank 1 alone
        expected_rank, expected_size = {0: (1, 2), 1: (0, 1), 2: (0, 2)}[rank]
        assert (ours["rank"], ours["size"]) == (expected_rank, expected_size)
        members = [0, 2] if rank != 1 else [1]
        assert ours["sum"] == (sum(torch.arange(5.0) * 0.1 + 0.3 * r for r in members)).tolist()
        root = 2 if rank != 1 else 1
        assert ours["bcast"] == [0.25 + root] * 3
        assert ours["member"] == (rank != 1)


def private_dev_shm():
    """A /dev/shm of this process's own (a mount namespace with a fresh tmpfs; needs root),
    as a container with host networking has: same host name and boot id, no shared segment.
    False where not permitted."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x00020000, 0x4000, 1 << 18
    if libc.unshare(CLONE_NEWNS) != 0:
        return False
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    return libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0, b"size=256m") == 0


def body_separate_dev_shm(rank, size, store_path):
    import datetime

    import torch.distributed as dist

    from tcoll_torch import _C

    if rank == size - 1 and not private_dev_shm():
        return "SKIP"
    dist.init_process_group("tcoll", init_method="file://" + store_path, rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=10))
    x = torch.full((1000,), 0.5 * (rank + 1))
    dist.all_reduce(x)
    big = torch.full((100000,), 0.25 * rank)
    dist.all_reduce(big)
    layout = _C.layout_of(dist.group.WORLD._get_backend(torch.device("cpu")))
    dist.destroy_process_group()
    return layout, x[0].item(), big[0].item()


def test_ranks_that_do_not_share_dev_shm_are_different_nodes(tmp_path):
    size = 3  # ranks 0 and 1 share /dev/shm, rank 2 has its own
    results = run_ranks(body_separate_dev_shm, size, str(tmp_path / "store"), init=False,
                        deadline=60)
    if "SKIP" in results:
        import pytest
        pytest.skip("cannot make a mount namespace with a private /dev/shm (not root?)")
    for rank, (layout, small, big) in enumerate(results):
        node, nodes = layout[0], layout[1]
        assert nodes == 2, (rank, layout)
        assert node == (1 if rank == 2 else 0), (rank, layout)
        assert small == 0.5 * (1 + 2 + 3) and big == 0.25 * (0 + 1 + 2), (rank, small, big)
