"""What PyTorch itself costs per dist.all_reduce of 8 B, layer by layer, on one process (no
peer, so no communication):

  - torch's own FakeProcessGroup, a backend that does nothing: the floor under any
    backend;
  - the tcoll backend entered at three depths: dist.all_reduce (what users call),
    ProcessGroup.allreduce(...).wait() (the dispatcher and Work),
    and the backend object's allreduce(...).wait() (pybind and tcoll alone).

    .venv/bin/python bench/torch/null_backend_overhead.py
    TORCH_FR_BUFFER_SIZE=0 .venv/bin/python bench/torch/null_backend_overhead.py

The second run turns off torch's Flight Recorder (tcoll records into it itself; a
backend that does not record itself gets torch's recording hook): it captures a stack trace
per call.

`--package DIR` takes tcoll_torch from DIR instead of the repository's python/ (a copy of
another build, to compare two builds in interleaved runs); `--skip-fake` leaves out the
FakeProcessGroup line.
"""
import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

parser = argparse.ArgumentParser()
parser.add_argument("--package", default=os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
parser.add_argument("--skip-fake", action="store_true")
args = parser.parse_args()
sys.path.insert(0, os.path.abspath(args.package))


def best_us(call, reps=5, iters=20000):
    for _ in range(1000):
        call()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(iters):
            call()
        best = min(best, (time.perf_counter() - start) / iters)
    return best * 1e6


torch.set_num_threads(1)
x = torch.rand(2)
print(f"# torch {torch.__version__}, TORCH_FR_BUFFER_SIZE="
      f"{os.environ.get('TORCH_FR_BUFFER_SIZE', '(unset: 2000)')}; 8 B all_reduce, us per "
      "call, best of 5 x 20000")
if not args.skip_fake:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    print(f"FakeProcessGroup, dist.all_reduce: {best_us(lambda: dist.all_reduce(x)):.2f}")
    dist.destroy_process_group()

import tcoll_torch  # noqa: E402  registers "tcoll"

if not os.path.abspath(tcoll_torch.__file__).startswith(os.path.abspath(args.package)):
    sys.exit(f"tcoll_torch came from {tcoll_torch.__file__}, not {args.package}")

dist.init_process_group("tcoll", init_method="file://" + tempfile.mktemp(), rank=0,
                        world_size=1)
group = dist.group.WORLD
backend = group._get_backend(torch.device("cpu"))
print(f"tcoll, dist.all_reduce: {best_us(lambda: dist.all_reduce(x)):.2f}")
print(f"tcoll, ProcessGroup.allreduce().wait(): "
      f"{best_us(lambda: group.allreduce([x]).wait()):.2f}")
print(f"tcoll, backend.allreduce().wait(): {best_us(lambda: backend.allreduce([x]).wait()):.2f}")
dist.destroy_process_group()
