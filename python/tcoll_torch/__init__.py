"""tcoll as a torch.distributed backend for CPU tensors (docs/torch.md).

``import tcoll_torch`` registers the backend "tcoll"; then

    dist.init_process_group("tcoll", ...)            # CPU tensors on tcoll
    dist.init_process_group("cpu:tcoll,cuda:nccl")   # CPU tensors on tcoll, CUDA on NCCL
    dist.new_group(ranks, backend="tcoll")

and ``tcoll_torch.DistributedDataParallel`` runs tcoll's planners and adaptors in training
(ddp.py), with ``tcoll_torch.CscMomentumSGD`` for CSC's momentum correction (optim.py).
"""
import torch
import torch.distributed as dist

from . import _C, hooks
from .ddp import DistributedDataParallel
from .optim import CscMomentumSGD

__all__ = ["BACKEND_NAME", "CscMomentumSGD", "DistributedDataParallel"]

BACKEND_NAME = "tcoll"


def _create(store, rank, size, timeout):
    # Which ranks share a node (host name and boot id, exchanged through the store). Across
    # nodes, Gloo's send/recv carry tcoll's messages: one group of every rank, and one per
    # local index joining that index on every node (the hierarchical allreduce's inter-node
    # level). torch's wheel has no Gloo headers for C++, so they are made here.
    layout = _C.node_layout(store, rank, size)
    node, nodes, local_rank, _, shards = layout
    flat = inter = None
    if nodes > 1:
        flat = dist.ProcessGroupGloo(dist.PrefixStore("tcoll/flat", store), rank, size, timeout)
        if local_rank < shards:
            inter = dist.ProcessGroupGloo(dist.PrefixStore(f"tcoll/inter{local_rank}", store),
                                          node, nodes, timeout)
    return _C.create_backend(store, rank, size, timeout, layout, flat, inter)


if BACKEND_NAME not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu"])
