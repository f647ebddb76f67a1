"""What PyTorch itself costs per dist.all_reduce, with a backend that does nothing (torch's
own FakeProcessGroup): the floor under any backend's Python-visible time per call.

    .venv/bin/python bench/torch/null_backend_overhead.py
"""
import time

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
x = torch.rand(2)
for _ in range(1000):
    dist.all_reduce(x)
best = float("inf")
for _ in range(5):
    start = time.perf_counter()
    for _ in range(20000):
        dist.all_reduce(x)
    best = min(best, (time.perf_counter() - start) / 20000)
print(f"torch {torch.__version__}: dist.all_reduce of 8 B on a backend that does nothing: "
      f"{best * 1e6:.2f} us per call (best of 5 x 20000)")
