"""tcoll as a torch.distributed backend for CPU tensors (docs/torch.md).

``import tcoll_torch`` registers the backend "tcoll"; then

    dist.init_process_group("tcoll", ...)            # CPU tensors on tcoll
    dist.init_process_group("cpu:tcoll,cuda:nccl")   # CPU tensors on tcoll, CUDA on NCCL
    dist.new_group(ranks, backend="tcoll")
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["BACKEND_NAME"]

BACKEND_NAME = "tcoll"


def _create(store, rank, size, timeout):
    return _C.create_backend(store, rank, size, timeout)


if BACKEND_NAME not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu"])
