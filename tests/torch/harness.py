"""Runs a function on P processes joined in a torch.distributed group, collects results.

`run_ranks(fn, P, *args, backend="tcoll")` starts P processes (forks of a server that
has imported torch, or spawned interpreters where `env` is given); rank r calls
`init_process_group(backend, init_method="file://...", rank=r, world_size=P)` then
`fn(r, P, *args)` and sends back its return value (anything picklable; tensors are fine)
or its exception's text. The parent waits at most `deadline` seconds, kills what is left
(a hang fails the test instead of blocking CI) and returns the list of results by rank.
"""
import datetime
import io
import multiprocessing
import os
import queue as queue_module
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(HERE, "..", "..", "python")


class RankFailed(Exception):
    pass


_forkserver = None


def _context(env):
    """Where rank processes come from. A fork server that has imported torch and tcoll_torch
    once (each rank is a fork of it: importing torch costs 2-3 s of CPU per process, most
    of the torch suite's time in CI), or, when `env` is given, fresh interpreters (spawn):
    torch reads some variables when it is imported, and a fork server's children see the
    environment it started with."""
    global _forkserver
    if env:
        return multiprocessing.get_context("spawn")
    if _forkserver is None:
        if PYTHON_DIR not in sys.path:
            sys.path.insert(0, PYTHON_DIR)  # the fork server starts with this sys.path
        _forkserver = multiprocessing.get_context("forkserver")
        _forkserver.set_forkserver_preload(["torch", "torch.distributed", "tcoll_torch"])
    return _forkserver


def set_hostname(name):
    """Gives this process a host name of its own (a UTS namespace; needs root): an emulated
    node, as tcoll tells nodes apart by host name and boot id. False where not permitted."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    CLONE_NEWUTS = 0x04000000
    if libc.unshare(CLONE_NEWUTS) != 0:
        return False
    encoded = name.encode()
    return libc.sethostname(encoded, len(encoded)) == 0


def _rank_main(fn, rank, size, backend, store_path, timeout_s, queue, args, init, hostnames):
    sys.path.insert(0, PYTHON_DIR)
    if hostnames and not set_hostname(hostnames[rank]):
        queue.put((rank, "error", "SKIP: cannot make a UTS namespace (not root?)"))
        return
    try:
        import torch
        import torch.distributed as dist

        import tcoll_torch  # noqa: F401  registers "tcoll"

        torch.set_num_threads(1)
        if init:
            dist.init_process_group(
                backend,
                init_method="file://" + store_path,
                rank=rank,
                world_size=size,
                timeout=datetime.timedelta(seconds=timeout_s),
            )
        result = fn(rank, size, *args)
        if init and dist.is_initialized():
            dist.destroy_process_group()
        # as bytes: a tensor put on a multiprocessing queue travels by a shared-memory handle
        # that dies with this process
        buffer = io.BytesIO()
        torch.save(result, buffer)
        queue.put((rank, "ok", buffer.getvalue()))
    except BaseException:  # noqa: BLE001  reported to the parent, which fails the test
        queue.put((rank, "error", traceback.format_exc()))


def run_ranks(fn, size, *args, backend="tcoll", timeout_s=30, deadline=120, init=True,
              allow_errors=False, env=None, hostnames=None):
    ctx = _context(env)
    queue = ctx.Queue()
    directory = tempfile.mkdtemp(prefix="tcoll-torch-test-")
    store_path = os.path.join(directory, "store")
    procs = [
        ctx.Process(target=_rank_main,
                    args=(fn, r, size, backend, store_path, timeout_s, queue, args, init,
                          hostnames))
        for r in range(size)
    ]
    # the environment is inherited at start (torch reads some of it, such as
    # TORCH_DISTRIBUTED_DEBUG, when a child imports it to unpickle `fn`)
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        for p in procs:
            p.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    results, errors = [None] * size, {}
    end = time.monotonic() + deadline
    reported = set()
    while len(reported) < size and time.monotonic() < end:
        try:
            rank, status, value = queue.get(timeout=0.2)
        except queue_module.Empty:
            # every rank that has not reported has exited, and none put its result just
            # before it exited: nothing more will come
            if queue.empty() and all(
                    not procs[r].is_alive() for r in range(size) if r not in reported):
                break
            continue
        reported.add(rank)
        if status == "ok":
            import torch
            results[rank] = torch.load(io.BytesIO(value), weights_only=False)
        else:
            errors[rank] = value
    for p in procs:
        p.join(timeout=max(0.1, end - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    if hung:
        raise RankFailed(f"ranks {hung} still running after {deadline} s (hang); "
                         f"errors: {errors}")
    missing = [r for r in range(size) if results[r] is None and r not in errors]
    if missing and allow_errors:
        for r in missing:
            errors[r] = f"exited with code {procs[r].exitcode} without a result"
    elif missing:
        raise RankFailed(f"ranks {missing} exited without a result (exit codes "
                         f"{[p.exitcode for p in procs]}); errors: {errors}")
    if errors and not allow_errors:
        raise RankFailed("\n".join(f"rank {r}:\n{e}" for r, e in sorted(errors.items())))
    return (results, errors) if allow_errors else results
