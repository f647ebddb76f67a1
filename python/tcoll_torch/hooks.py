"""Communication hooks for users who keep PyTorch's own DistributedDataParallel:

    ddp.register_comm_hook(tcoll_torch.hooks.CscState(density=0.15), tcoll_torch.hooks.csc_hook)
    ddp.register_comm_hook(None, tcoll_torch.hooks.bf16_hook)     # or a process group

``csc_hook`` runs tcoll's sparse-chunk adaptor (GradientFlow's CSC, the C++
``sparse::csc_allreduce`` through ``_C.Reducer``) on each DDP bucket, with its own residual
per bucket; its process group must be a tcoll one (DDP's own, by default). ``bf16_hook`` and
``fp16_hook`` send a bucket as bfloat16 / float16 on any backend (on tcoll the sum
accumulates in float) and average it back into float32.
"""
import concurrent.futures

import torch
import torch.distributed as dist

from . import _C
from .ddp import reducer_options

__all__ = ["CscState", "csc_hook", "bf16_hook", "fp16_hook"]


def _default_group():
    return dist.distributed_c10d._get_default_group()


class CscState:
    """The state of ``csc_hook``: CSC's knobs (as ``tcoll::sparse::csc_options``) and one
    adaptor per DDP bucket, made on the bucket's first call (collective: every rank makes it
    at the same bucket). A bucket's work runs on one thread of its own, in bucket order, so
    every rank starts the adaptors' collectives in the same order."""

    def __init__(self, process_group=None, density=0.15, chunk_elements=32000,
                 warmup_iterations=100, threshold_bytes=4 << 20, residual="error_feedback",
                 momentum=0.9):
        self.process_group = process_group
        self.options = reducer_options(scheme="csc", density=density,
                                       chunk_elements=chunk_elements,
                                       warmup_iterations=warmup_iterations,
                                       threshold_bytes=threshold_bytes, residual=residual,
                                       momentum=momentum)
        self.reducers = {}
        self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                             thread_name_prefix="tcoll-csc")

    def _run(self, bucket_index, layout, buffer):
        entry = self.reducers.get(bucket_index)
        if entry is None or entry[2] != layout:
            # a new bucket, or DDP re-laid it (after its first iteration, in the order the
            # gradients arrived): a new adaptor, whose chunks are this layout's
            group = self.process_group or _default_group()
            reducer = _C.Reducer(group._get_backend(torch.device("cpu")), [buffer.numel()],
                                 self.options)
            entry = (reducer, reducer.grads()[0], layout)
            self.reducers[bucket_index] = entry
        reducer, pool, _ = entry
        pool.copy_(buffer)
        reducer.mark_ready(0)
        reducer.finish()  # important chunks averaged; the rest zero, kept in the residual
        buffer.copy_(pool)
        return buffer


def csc_hook(state, bucket):
    """GradientFlow's coarse-grained sparse chunks on a DDP bucket (see ``CscState``)."""
    if bucket.buffer().dtype != torch.float32:
        raise ValueError(f"tcoll_torch.hooks.csc_hook: bucket {bucket.index()} is "
                         f"{bucket.buffer().dtype}; CSC runs on float32")
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
