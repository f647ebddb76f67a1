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
tcoll the sum accumulates in float) and average it back into float32. Every hook's scheme is
one of tcoll's compression registry (``_C.compression_registry()``); a state's knobs are
checked against it when its first bucket arrives.
"""
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
    makes it at the same bucket).

    Every collective of the adaptors is started from the hook's own call, on the thread
    that runs backward, in bucket order: DDP starts its own collectives (the map of used
    parameters under ``find_unused_parameters``, ``static_graph``'s) on that thread too, so
    every rank starts all of them in the same order. A bucket's reduction starts when DDP
    hands it over and finishes at the next bucket's call (its communication overlaps the
    backward in between); the last bucket finishes every one still open. Its future
    completes then."""

    scheme = None

    def __init__(self, process_group, **options):
        self.process_group = process_group
        self.options = reducer_options(scheme=self.scheme, **options)
        self.reducers = {}
        self._open = []  # (reducer, pool view, bucket buffer, future), in start order

    def _start(self, bucket_index, layout, buffer):
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
        reducer.mark_ready(0)  # starts the adaptor's collective (its tags are drawn now)
        return reducer, pool

    def _finish_open(self, keep_last=0):
        """Finishes the open buckets but the last `keep_last`, oldest first."""
        while len(self._open) > keep_last:
            reducer, pool, buffer, future = self._open.pop(0)
            try:
                reducer.finish()  # the averaged selection; zero where nothing was sent
                buffer.copy_(pool)
                future.set_result(buffer)
            except Exception as e:  # noqa: BLE001  handed to DDP through the future
                future.set_exception(e)

    def _run(self, bucket):
        future = torch.futures.Future()
        buffer = bucket.buffer()
        layout = tuple((id(p), p.numel()) for p in bucket.parameters())
        try:
            reducer, pool = self._start(bucket.index(), layout, buffer)
        except Exception as e:  # noqa: BLE001
            self._finish_open()
            future.set_exception(e)
            return future
        self._open.append((reducer, pool, buffer, future))
        self._finish_open(keep_last=0 if bucket.is_last() else 1)
        return future


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
    iteration (``"momentum_scaled"`` keeps it times ``momentum``, ``"none"`` drops it);
    ``warmup_iterations`` ramps the density from dense (iteration 0 is one dense allreduce);
    the adaptor made for a bucket DDP re-lays starts its warm-up afresh."""

    scheme = "topk"

    def __init__(self, process_group=None, density=0.01, residual="error_feedback",
                 momentum=None, warmup_iterations=None):
        super().__init__(process_group, density=density, residual=residual, momentum=momentum,
                         warmup_iterations=warmup_iterations)


class DgcState(_SparseState):
    """The state of ``dgc_hook``: DGC (momentum correction and masking around top-k) with
    momentum factor ``momentum``. The momentum is inside the averaged gradient the hook
    returns: train with plain SGD (no momentum of the optimizer's own)."""

    scheme = "dgc"

    def __init__(self, process_group=None, density=0.01, momentum=0.9, warmup_iterations=None):
        super().__init__(process_group, density=density, momentum=momentum,
                         warmup_iterations=warmup_iterations)


def _sparse_hook(state, bucket):
    if bucket.buffer().dtype != torch.float32:
        raise ValueError(f"tcoll_torch.hooks: bucket {bucket.index()} is "
                         f"{bucket.buffer().dtype}; the {state.scheme} hook runs on float32")
    return state._run(bucket)


def csc_hook(state, bucket):
    """GradientFlow's coarse-grained sparse chunks on a DDP bucket (see ``CscState``)."""
    return _sparse_hook(state, bucket)


def topk_hook(state, bucket):
    """Top-k with error feedback on a DDP bucket (see ``TopkState``)."""
    return _sparse_hook(state, bucket)


def dgc_hook(state, bucket):
    """Deep Gradient Compression on a DDP bucket (see ``DgcState``)."""
    return _sparse_hook(state, bucket)


def _registry_entry(name):
    for entry in _C.compression_registry():
        if entry["name"] == name:
            return entry
    raise KeyError(f"tcoll_torch.hooks: no compression scheme '{name}' in the registry")


def _wire_hook(scheme):
    """The hook of the registry's wire format ``scheme`` (``half``, ``bfloat16``)."""
    entry = _registry_entry(scheme)
    if entry["family"] != "wire_format":
        raise ValueError(f"tcoll_torch.hooks: scheme '{scheme}' is not a wire format")
    dtype = {"half": torch.float16, "bfloat16": torch.bfloat16}[entry["wire"]]

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


bf16_hook = _wire_hook("bfloat16")
bf16_hook.__doc__ = "A DDP bucket as bfloat16 on the wire, summed, then averaged in float32."
fp16_hook = _wire_hook("half")
fp16_hook.__doc__ = "A DDP bucket as float16 on the wire, summed, then averaged in float32."
