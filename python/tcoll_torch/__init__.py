"""tcoll as a torch.distributed backend for CPU tensors (docs/torch.md).

``import tcoll_torch`` registers the backend "tcoll"; then

    dist.init_process_group("tcoll", ...)            # CPU tensors on tcoll
    dist.init_process_group("cpu:tcoll,cuda:nccl")   # CPU tensors on tcoll, CUDA on NCCL
    dist.new_group(ranks, backend="tcoll")

and ``tcoll_torch.DistributedDataParallel`` runs tcoll's planners and adaptors in training
(ddp.py), with ``tcoll_torch.CscMomentumSGD`` for CSC's momentum correction (optim.py).
"""
import atexit
import weakref

import torch
import torch.distributed as dist

from . import _C, hooks
from .ddp import DistributedDataParallel
from .optim import CscMomentumSGD

__all__ = ["BACKEND_NAME", "CscMomentumSGD", "DistributedDataParallel", "all_reduce"]

BACKEND_NAME = "tcoll"


_finalize_registered = False
_cpu = torch.device("cpu")
_direct = weakref.WeakKeyDictionary()  # group -> its DirectHandle, gone with the group


def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None):
    """Allreduce of one CPU tensor in place over a tcoll group, returning when it is done.

    The same collective as ``dist.all_reduce(tensor, op, group)`` (same result, same order
    among the group's calls), called straight into tcoll: without torch.distributed's
    per-call layers (its dispatcher, the Work object, the Flight Recorder), which cost more
    than a small collective itself (docs/torch.md). DeepSpeed's ``inference_all_reduce`` is
    such a call. Torch's debug tools (TORCH_DISTRIBUTED_DEBUG, the Flight Recorder) do not
    see it. ``op`` is a ``dist.ReduceOp`` member other than PREMUL_SUM.
    """
    group = group if group is not None else dist.group.WORLD
    handle = _direct.get(group)
    if handle is None:
        handle = _direct[group] = _C.DirectHandle(group._get_backend(_cpu))
    handle.all_reduce(tensor, op)


def _finalize_mpi():
    # MPI_Finalize where tcoll initialised MPI (mpirun reports a process that exits without
    # it as failed); the process groups go first, so no engine thread is inside MPI then.
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # already torn down, or a broken group: finalize regardless
            pass
    _C.mpi_finalize()


def _create(store, rank, size, timeout, global_ranks=()):
    # Which ranks share a node (host name and boot id, exchanged through the store). Across
    # nodes, MPI carries tcoll's messages under an MPI launcher (mpi_link.hpp), otherwise
    # Gloo's send/recv: one group of every rank, and one per local index joining that index
    # on every node (the hierarchical allreduce's inter-node level). torch's wheel has no
    # Gloo headers for C++, so the Gloo groups are made here.
    global _finalize_registered
    layout = _C.node_layout(store, rank, size)
    node, nodes, local_rank, _, shards, _ = layout
    flat = inter = None
    mpi_ranks = []
    if nodes > 1:
        mpi_ranks = _C.mpi_world_ranks(store, rank, size)
        if _C.mpi_initialised_here() and not _finalize_registered:
            atexit.register(_finalize_mpi)
            _finalize_registered = True
    if nodes > 1 and not mpi_ranks:
        flat = dist.ProcessGroupGloo(dist.PrefixStore("tcoll/flat", store), rank, size, timeout)
        if local_rank < shards:
            inter = dist.ProcessGroupGloo(dist.PrefixStore(f"tcoll/inter{local_rank}", store),
                                          node, nodes, timeout)
    return _C.create_backend(store, rank, size, timeout, layout, flat, inter, mpi_ranks,
                             list(global_ranks))


def _create_group(options, _backend_options):
    # register_backend's extended form: the same arguments, and the group's world ranks
    # (empty for the default group), which its Flight Recorder entries name
    return _create(options.store, options.group_rank, options.group_size, options.timeout,
                   options.global_ranks_in_group)


def _record_flight_recorder_natively():
    """Tells torch that tcoll's groups record into its Flight Recorder themselves, as Gloo's
    and NCCL's do, so it attaches no recording hook to them (the hook costs about 2 us per
    call; tcoll's own entries a fraction of that: docs/torch.md). torch keeps that list in
    ``distributed_c10d._FR_SELF_RECORDING_BACKENDS``, where its NCCL registration adds and
    removes itself; where a torch has no such list, or TCOLL_TORCH_FLIGHT_RECORDER=hook asks
    for it, tcoll records nothing itself and torch's hook (if any) records its calls."""
    import os
    import torch.distributed.distributed_c10d as c10d
    choice = os.environ.get("TCOLL_TORCH_FLIGHT_RECORDER", "native")
    if choice not in ("native", "hook"):
        raise ValueError(f"tcoll: TCOLL_TORCH_FLIGHT_RECORDER is {choice!r}; expected "
                         "'native' (the default) or 'hook'")
    self_recording = getattr(c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if choice == "hook" or not isinstance(self_recording, set):
        return
    self_recording.add(BACKEND_NAME)
    _C.set_records_flight_recorder(True)


if BACKEND_NAME not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND_NAME, _create_group, extended_api=True,
                                  devices=["cpu"])
    _record_flight_recorder_natively()
