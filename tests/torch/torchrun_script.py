"""Run by test_backend.py under torchrun: env:// initialisation (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT from torchrun), one all_reduce of fractional values, the result
saved per rank for the test to compare."""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import tcoll_torch  # noqa: E402,F401

dist.init_process_group("tcoll")  # env:// is the default
rank, size = dist.get_rank(), dist.get_world_size()
x = torch.arange(1000, dtype=torch.float64) / 7 + rank / 3
dist.all_reduce(x)
torch.save({"rank": rank, "size": size, "x": x}, os.path.join(sys.argv[1], f"rank{rank}.pt"))
dist.destroy_process_group()
