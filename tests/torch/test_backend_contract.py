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
    # a callback that waits for a call queued after the one it is chained on
    d = torch.full((BIG,), 2.0 * (rank + 1))
    w1 = dist.all_reduce(torch.ones(BIG), async_op=True)
    w2 = dist.all_reduce(d, async_op=True)
    waited = w1.get_future().then(lambda fut: (w2.wait(), d[0].item())[1])
    # and a small one started from a callback
    small = dist.all_reduce(torch.ones(BIG), async_op=True).get_future().then(
        lambda fut: (dist.all_reduce(c), c[0].item())[1])
    return nested.wait(), waited.wait(), small.wait()


def test_callbacks_may_wait_for_collectives_of_their_group():
    size = 2
    results = run_ranks(body_nested_callbacks, size, timeout_s=10, deadline=60)
    ranks = sum(r + 1 for r in range(size))
    for rank, (nested, waited, small) in enumerate(results):
        assert nested == 0.25 * ranks + 0.5 * ranks, (rank, nested)
        assert waited == 2.0 * ranks, (rank, waited)
        assert small == 1.0 * ranks, (rank, small)
