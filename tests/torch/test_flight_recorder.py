"""The "tcoll" backend records its calls into torch's Flight Recorder itself (issue 47 §2,
docs/torch.md): the entries torch's own recording hook made, once each, retired when the
call has finished, and read by torch's trace analyzer
(`torch.distributed.flight_recorder`), which finds a desynchronised collective and its
culprit rank in them.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PYTHON_DIR, run_ranks  # noqa: E402

BIG = 1 << 18  # float32 elements: 1 MiB, queued on the engine (above the 64 KiB run inline)


def _entries(backend="tcoll"):
    dump = torch._C._distributed_c10d._dump_fr_trace_json(True, False, backend=backend)
    return json.loads(dump)["entries"]


def body_calls(rank, size, directory):
    import torch.distributed as dist

    import tcoll_torch

    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = os.path.join(directory, "trace_")
    peer = 1 - rank
    x = torch.full((3,), 0.1 * (rank + 1))
    dist.all_reduce(x)
    dist.broadcast(x, 1)
    dist.all_gather_into_tensor(torch.empty(3 * size), x)
    dist.reduce_scatter_tensor(torch.empty(2), torch.full((2 * size,), 0.3))
    if rank == 0:
        dist.send(x, peer)
    else:
        dist.recv(x, peer)
    big = torch.full((BIG,), 0.7)
    dist.all_reduce(big, async_op=True).wait()  # runs on the engine thread
    tcoll_torch.all_reduce(x)  # bypasses torch's dispatcher: not recorded
    dist.monitored_barrier()  # neither is this (the hook never saw it either)
    dist.barrier()
    entries = _entries()
    torch._C._distributed_c10d._dump_fr_trace_file(rank, True, True, False, backend="tcoll")
    return [{k: e.get(k) for k in ("profiling_name", "collective_seq_id", "p2p_seq_id",
                                    "op_id", "input_sizes", "output_sizes", "state",
                                    "retired", "duration_ms", "is_p2p")} for e in entries]


def _analyze(directory):
    """torch's Flight Recorder analyzer over the ranks' dump files."""
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig
    from torch.distributed.flight_recorder.components.loader import read_dir

    args = JobConfig().parse_args([directory, "-p", "trace_"])
    details, version = read_dir(args)
    return build_db(details, args, version)


def test_every_call_is_recorded_once_and_completed():
    directory = tempfile.mkdtemp(prefix="tcoll-fr-")
    results = run_ranks(body_calls, 2, directory)
    for rank, entries in enumerate(results):
        p2p = "tcoll:send 0->1" if rank == 0 else "tcoll:recv 1<-0"
        # the names, order and sizes torch's hook recorded for these calls (not the
        # direct all_reduce, not monitored_barrier), each once: no hook records beside tcoll
        assert [e["profiling_name"] for e in entries] == [
            "tcoll:all_reduce", "tcoll:broadcast", "tcoll:_all_gather_base",
            "tcoll:_reduce_scatter_base", p2p, "tcoll:all_reduce", "tcoll:barrier"], entries
        assert [e["collective_seq_id"] for e in entries] == [1, 2, 3, 4, 4, 5, 6]
        assert [e["p2p_seq_id"] for e in entries] == [0, 0, 0, 0, 1, 1, 1]
        assert [e["op_id"] for e in entries] == list(range(7))
        assert [e["is_p2p"] for e in entries] == [False] * 4 + [True] + [False] * 2
        assert entries[2]["input_sizes"] == [[3]] and entries[2]["output_sizes"] == [[6]]
        assert entries[3]["input_sizes"] == [[4]] and entries[3]["output_sizes"] == [[2]]
        assert entries[5]["input_sizes"] == [[BIG]]
        assert entries[4]["input_sizes" if rank == 0 else "output_sizes"] == [[3]]
        assert entries[6]["input_sizes"] == [] and entries[6]["output_sizes"] == []
        for e in entries:  # retired when finished, with the call's duration (the hook: at issue)
            assert e["state"] == "completed" and e["retired"], e
            assert e["duration_ms"] is not None and e["duration_ms"] >= 0, e
    # torch's analyzer matches every call across the ranks, with the caller's stack
    db = _analyze(directory)
    assert len(db.collectives) == 7  # six collectives, and the send matched with its receive
    for c in db.collectives:
        assert c.pass_check and c.collective_state == "completed", c
        assert any(f["name"] == "body_calls" for f in c.collective_frames), c.collective_frames


def body_desync(rank, size, directory):
    import torch.distributed as dist

    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = os.path.join(directory, "trace_")
    dist.all_reduce(torch.full((4,), 0.25))
    error = None
    try:  # rank 1 passes twice the count: both fail, naming each other
        dist.all_reduce(torch.full((4 * (rank + 1),), 0.5))
    except Exception as e:  # noqa: BLE001
        error = str(e)
    torch._C._distributed_c10d._dump_fr_trace_file(rank, True, True, False, backend="tcoll")
    return error, [e["state"] for e in _entries()]


def test_the_analyzer_names_a_desynchronised_call_and_its_rank():
    directory = tempfile.mkdtemp(prefix="tcoll-fr-")
    for rank, (error, states) in enumerate(run_ranks(body_desync, 2, directory)):
        assert error and "every rank must pass the same count" in error, (rank, error)
        assert states == ["completed", "scheduled"], (rank, states)  # the failed one: never done
    db = _analyze(directory)
    failed = [c for c in db.collectives if not c.pass_check]
    assert len(failed) == 1, db.collectives
    assert failed[0].collective_name == "tcoll:all_reduce" and failed[0].collective_seq_id == 2
    assert failed[0].collective_state == "scheduled"
    assert 1 in failed[0].mismatch_collectives, failed[0]  # rank 1's call differs from rank 0's


def body_wrapped(rank, size):
    import torch.distributed as dist

    peer = 1 - rank
    dist.all_reduce(torch.full((3,), 0.1))
    dist.broadcast(torch.zeros(5, dtype=torch.int64), 1)
    dist.all_gather_into_tensor(torch.empty(2 * size, dtype=torch.float64),
                                torch.zeros(2, dtype=torch.float64))
    dist.reduce_scatter_tensor(torch.empty(1), torch.full((size,), 0.3))
    if rank == 0:
        dist.send(torch.zeros(4, dtype=torch.float16), peer)
    else:
        dist.recv(torch.zeros(4, dtype=torch.float16), peer)
    dist.all_reduce(torch.full((2, 3), 0.2, dtype=torch.float64))
    dist.broadcast(torch.zeros(7), 0)
    # the last four, which the ring of four keeps
    dist.all_reduce(torch.ones(1, dtype=torch.int32))
    dist.all_gather_into_tensor(torch.empty(3 * size, dtype=torch.int16),
                                torch.zeros(3, dtype=torch.int16))
    if rank == 1:
        dist.send(torch.zeros(6, dtype=torch.float64), peer)
    else:
        dist.recv(torch.zeros(6, dtype=torch.float64), peer)
    dist.barrier()
    return [{k: e.get(k) for k in ("profiling_name", "collective_seq_id", "p2p_seq_id", "op_id",
                                    "input_sizes", "output_sizes", "input_dtypes",
                                    "output_dtypes", "state", "is_p2p")} for e in _entries()]


def test_a_full_ring_keeps_the_newest_calls_as_they_were_made():
    # a ring of four entries (TORCH_FR_BUFFER_SIZE): each new entry replaces the oldest and
    # reuses its storage, so each of the last four must read as its own call, not as the
    # one it replaced (a longer name, more tensors, other dtypes)
    results = run_ranks(body_wrapped, 2, env={"TORCH_FR_BUFFER_SIZE": "4"})
    for rank, entries in enumerate(results):
        p2p = "tcoll:recv 0<-1" if rank == 0 else "tcoll:send 1->0"
        p2p_tensor = "output" if rank == 0 else "input"
        p2p_other = "input" if rank == 0 else "output"
        assert len(entries) == 4, entries
        gather, p2p_entry, barrier = entries[1], entries[2], entries[3]
        assert [e["profiling_name"] for e in entries] == [
            "tcoll:all_reduce", "tcoll:_all_gather_base", p2p, "tcoll:barrier"], entries
        assert [e["op_id"] for e in entries] == [7, 8, 9, 10]
        assert [e["collective_seq_id"] for e in entries] == [7, 8, 8, 9]
        assert [e["p2p_seq_id"] for e in entries] == [1, 1, 2, 2]
        assert [e["is_p2p"] for e in entries] == [False, False, True, False]
        assert entries[0]["input_sizes"] == [[1]] and entries[0]["input_dtypes"] == ["Int"]
        assert gather["input_sizes"] == [[3]] and gather["output_sizes"] == [[6]]
        assert gather["input_dtypes"] == ["Short"] and gather["output_dtypes"] == ["Short"]
        assert p2p_entry[p2p_tensor + "_sizes"] == [[6]], p2p_entry
        assert p2p_entry[p2p_tensor + "_dtypes"] == ["Double"], p2p_entry
        assert p2p_entry[p2p_other + "_sizes"] == [] and p2p_entry[p2p_other + "_dtypes"] == []
        assert barrier["input_sizes"] == [] and barrier["output_dtypes"] == [], barrier
        assert all(e["state"] == "completed" for e in entries), entries


def body_hooked(rank, size):
    import torch.distributed as dist

    x = torch.full((3,), 0.1 * (rank + 1))
    dist.all_reduce(x)
    dist.broadcast(x, 0)
    dist.barrier()
    return [(e["profiling_name"], e["state"]) for e in _entries()]


def test_torch_records_through_its_hook_when_asked():
    # TCOLL_TORCH_FLIGHT_RECORDER=hook: tcoll records nothing and torch's hook records each
    # call once, retired at issue ("scheduled"), as before tcoll recorded natively
    results = run_ranks(body_hooked, 2, env={"TCOLL_TORCH_FLIGHT_RECORDER": "hook"})
    for entries in results:
        assert entries == [("tcoll:all_reduce", "scheduled"), ("tcoll:broadcast", "scheduled"),
                           ("tcoll:barrier", "scheduled")], entries


def test_a_bad_recorder_choice_fails_at_import():
    run = subprocess.run([sys.executable, "-c", "import tcoll_torch"], cwd=PYTHON_DIR,
                         env={**os.environ, "TCOLL_TORCH_FLIGHT_RECORDER": "both"},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "TCOLL_TORCH_FLIGHT_RECORDER is 'both'" in run.stderr, run.stderr
