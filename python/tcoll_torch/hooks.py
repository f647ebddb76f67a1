"""Communication hooks for users who keep PyTorch's own DistributedDataParallel:

    ddp.register_comm_hook(tcoll_torch.hooks.CscState(density=0.15), tcoll_torch.hooks.csc_hook)
    ddp.register_comm_hook(tcoll_torch.hooks.TopkState(density=0.01), tcoll_torch.hooks.topk_hook)
    ddp.register_comm_hook(tcoll_torch.hooks.DgcState(density=0.01), tcoll_torch.hooks.dgc_hook)
    ddp.register_comm_hook(None, tcoll_torch.hooks.bf16_hook)     # or a process group

``csc_hook``, ``topk_hook`` and ``dgc_hook`` run tcoll's sparse adaptors (GradientFlow's CSC,
the C++ ``sparse::csc_allreduce``; top-k with error feedback and DGC,
``sparse::topk_pool_allreduce``) on each DDP bucket through ``_C.Reducer``, with their own
state per bucket; their process group must be a tcoll one (DDP's own, by default).
``bf16_hook`` and ``fp16_hook`` send a bucket as bfloat16 / float16 on any backend (on
tcoll the sum accumulates in float) and average it back into float32.
"""
import concurrent.futures

import torch
import torch.distributed as dist

from . import _C
from .ddp import carry_state, reducer_options

__all__ = ["CscState", "TopkState", "DgcState", "csc_hook", "topk_hook", "dgc_hook",
           "bf16_hook", "fp16_hook"]


def _default_group():
    return dist.distributed_c10d._get_default_group()


class _SparseState:
    """One adaptor per DDP bucket, made on the bucket's first call (collective: every rank
    makes it at the same bucket). A bucket's work runs on one thread of the state's own, in
    bucket order, so every rank starts the adaptors' collectives in the same order."""

    scheme = None

    def __init__(self, process_group, **options):
        self.process_group = process_group
        self.options = reducer_options(scheme=self.scheme, **options)
        self.reducers = {}
        self._worker = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"tcoll-{self.scheme}")

    def _run(self, bucket_index, layout, buffer):
        entry = self.reducers.get(bucket_index)
        if entry is None or entry[2] != layout:
            # a new bucket, or DDP re-laid it (after its first iteration, in the order the
            # gradients arrived): a new adaptor on this layout, given the old one's state
            group = self.process_group or _default_group()
            reducer = _C.Reducer(group._get_backend(torch.device("cpu")), [buffer.numel()],
                                 self.options)
            if entry is not None:
                carry_state(entry[0].state(), entry[2], reducer.state(), layout)
            entry = (reducer, reducer.grads()[0], layout)
            self.reducers[bucket_index] = entry
        reducer, pool, _ = entry
        pool.copy_(buffer)
        reducer.mark_ready(0)
        reducer.finish()  # the averaged selection; zero where nothing was sent
        buffer.copy_(pool)
        return buffer


class CscState(_SparseState):
    """The state of ``csc_hook``: CSC's knobs (as ``tcoll::sparse::csc_options``). A re-laid
    bucket gets a new adaptor that starts afresh: CSC's state is per chunk, and the chunks
    are the new layout's (it begins with the warm-up's dense iterations)."""

    scheme = "csc"

    def __init__(self, process_group=None, density=0.15, chunk_elements=32000,
                 warmup_iterations=100, threshold_bytes=4 << 20, residual="error_feedback",
                 momentum=0.9):
        super().__init__(process_group, density=density, chunk_elements=chunk_elements,
                         warmup_iterations=warmup_iterations, threshold_bytes=threshold_bytes,
                         residual=residual, momentum=momentum)


class TopkState(_SparseState):
    """The state of ``topk_hook``: each rank sends the ``density`` fraction of a bucket's
    elements of largest magnitude; ``residual="error_feedback"`` keeps the rest for the next
    iteration (``"none"`` drops it)."""

    scheme = "topk"

    def __init__(self, process_group=None, density=0.01, residual="error_feedback"):
        super().__init__(process_group, density=density, residual=residual)


class DgcState(_SparseState):
    """The state of ``dgc_hook``: DGC (momentum correction and masking around top-k) with
    momentum factor ``momentum``. The momentum is inside the averaged gradient the hook
    returns: train with plain SGD (no momentum of the optimizer's own)."""

    scheme = "dgc"

    def __init__(self, process_group=None, density=0.01, momentum=0.9):
        super().__init__(process_group, density=density, momentum=momentum)


def _sparse_hook(state, bucket):
    if bucket.buffer().dtype != torch.float32:
        raise ValueError(f"tcoll_torch.hooks: bucket {bucket.index()} is "
                         f"{bucket.buffer().dtype}; the {state.scheme} hook runs on float32")
    future = torch.futures.Future()
    buffer = bucket.buffer()

    def done(job):
        try:
            future.set_result(job.result())
        except Exception as e:  # noqa: BLE001  handed to DDP through the future
            future.set_exception(e)

    layout = tuple((id(p), p.numel()) for p in bucket.parameters())
    state._worker.submit(state._run, bucket.index(), layout, buffer).add_done_callback(done)
    return future


def csc_hook(state, bucket):
    """GradientFlow's coarse-grained sparse chunks on a DDP bucket (see ``CscState``)."""
    return _sparse_hook(state, bucket)


def topk_hook(state, bucket):
    """Top-k with error feedback on a DDP bucket (see ``TopkState``)."""
    return _sparse_hook(state, bucket)


def dgc_hook(state, bucket):
    """Deep Gradient Compression on a DDP bucket (see ``DgcState``)."""
    return _sparse_hook(state, bucket)


def _wire_hook(dtype):
    def hook(process_group, bucket):
        group = process_group or _default_group()
        buffer = bucket.buffer()
        wire = buffer.to(dtype)
        size = dist.get_world_size(group)

        def back(fut):
            buffer.copy_(fut.value()[0])
            return buffer.div_(size)

        return dist.all_reduce(wire, group=group, async_op=True).get_future().then(back)

    return hook


bf16_hook = _wire_hook(torch.bfloat16)
bf16_hook.__doc__ = "A DDP bucket as bfloat16 on the wire, summed, then averaged in float32."
fp16_hook = _wire_hook(torch.float16)
fp16_hook.__doc__ = "A DDP bucket as float16 on the wire, summed, then averaged in float32."
