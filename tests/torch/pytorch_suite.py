"""PyTorch's own distributed test suite (`torch.testing._internal.distributed.distributed_test`,
shipped in the torch wheel) run against the "tcoll" backend, or against Gloo for comparison.

Most of the suite's CPU tests run only when its BACKEND is "gloo". This runner sets BACKEND
to "gloo", so those tests run, and with `--backend tcoll` makes every process group they
create a tcoll one: `init_process_group` and `new_group` given "gloo" (or nothing) create
"tcoll" groups in every test process. Tests that assert Gloo's own identity or its error
texts fail that way by design; docs/torch.md lists them. `--as mpi` sets BACKEND to "mpi"
instead (the groups asked of "mpi" are made on the backend under test), so the tests it
keeps for MPI run too: CPU all_to_all and the subgroup tests below 8 processes.

    .venv/bin/python tests/torch/pytorch_suite.py --backend tcoll --world-size 2
    .venv/bin/python tests/torch/pytorch_suite.py --backend gloo --world-size 3 -k allreduce
    ... --json out.json   # every test's outcome, and the counts
    ... --list            # the tests the filters select, without running them
    ... --ci              # the subset .ci/run runs (CI_TESTS below; about 4 minutes)
    ... --as mpi --world-size 3 --ci   # and its MPI-only subset (CI_TESTS_AS_MPI)
    ... --ran-in gloo.json  # only the tests that ran there (skips depend on the machine)

Run as `test_distributed_spawn.py` runs it: each test spawns WORLD_SIZE processes, which
import this file, so the redirection to tcoll holds there too.
"""
import argparse
import fnmatch
import json
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

# read by distributed_test when it is imported, in this process and in every rank's: the
# backend the suite believes it runs (its skips and decorators read it), "gloo" unless
# `--as mpi` (TCOLL_SUITE_AS) asks for the tests it runs only on MPI
SUITE_AS = os.environ.get("TCOLL_SUITE_AS", "gloo")
os.environ["BACKEND"] = SUITE_AS
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", "/tmp")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)

RUN_ON = os.environ.get("TCOLL_SUITE_BACKEND", "tcoll")
if RUN_ON == "tcoll" or SUITE_AS != "gloo":
    if RUN_ON == "tcoll":
        import tcoll_torch  # noqa: F401,E402  registers "tcoll"
    from torch.distributed import distributed_c10d  # noqa: E402

    def _on_backend_under_test(backend):
        # the groups the suite asks of "gloo" (or of the backend it believes it runs, or of
        # none) are made on the backend under test
        if backend is None or str(backend).lower() in ("gloo", SUITE_AS):
            return RUN_ON
        return backend

    _init, _new_group = distributed_c10d.init_process_group, distributed_c10d.new_group

    def init_process_group(*args, backend=None, **kwargs):
        return _init(*args, backend=_on_backend_under_test(backend), **kwargs)

    def new_group(ranks=None, timeout=None, backend=None, *args, **kwargs):
        if backend is not None:
            backend = _on_backend_under_test(backend)
        return _new_group(ranks, timeout, backend, *args, **kwargs)

    for module in (dist, distributed_c10d):
        module.init_process_group = init_process_group
        module.new_group = new_group


# The subset CI runs (names containing one of these, none of CI_EXCLUDE): the collectives,
# point-to-point, barriers, futures and PyTorch's DDP on CPU, each passing on Gloo here.
# Most of the suite's other tests skip on a CPU-only machine, and a skipped test costs
# its process start-up all the same.
CI_TESTS = ["test_all_reduce", "test_all_gather", "test_broadcast", "test_reduce_",
            "test_scatter", "test_gather", "test_barrier", "test_monitored_barrier",
            "test_send_recv", "test_isend", "test_irecv", "test_batch_isend_irecv",
            "test_get_future", "test_sparse_all_reduce", "test_DistributedDataParallel",
            "test_accumulate_gradients_no_sync", "test_static_graph_api_cpu",
            "test_ddp_create_graph", "test_grads_same_across_ranks_with_no_sync"]
CI_EXCLUDE = ["profiler", "cuda", "gpu", "_timeout", "test_all_gather_object"]
# With `--as mpi` (at 3 processes) CI runs the CPU tests the suite keeps for MPI, which
# the Gloo run skips: all_to_all and all_to_all_single ("Only MPI supports ..."), and the
# tests on the subgroup of ranks 1 and 2, which skip below 8 processes on any backend but
# MPI (`skip_if_small_worldsize`). The 25 that ran in the full run of docs/torch.md.
CI_TESTS_AS_MPI = ["test_all_to_all", "test_all_gather_group", "test_all_reduce_group_",
                   "test_barrier_group", "test_broadcast_group", "test_gather_group",
                   "test_reduce_group_", "test_scatter_group"]
# those of them that skip at 2 processes without a GPU (listed from a run: a test that
# skips still starts its processes)
CI_SKIPPED_AT_2 = {"test_DistributedDataParallel",
                   "test_DistributedDataParallel_SyncBatchNorm",
                   "test_DistributedDataParallel_SyncBatchNorm_2D_Input",
                   "test_DistributedDataParallel_SyncBatchNorm_Channels_Last",
                   "test_DistributedDataParallel_SyncBatchNorm_Diff_Input_Sizes_Running_Value",
                   "test_DistributedDataParallel_SyncBatchNorm_Diff_Input_Sizes_gradient",
                   "test_DistributedDataParallel_SyncBatchNorm_No_Affine",
                   "test_DistributedDataParallel_SyncBatchNorm_Single_Input_Per_Process",
                   "test_DistributedDataParallel_SyncBatchNorm_half",
                   "test_DistributedDataParallel_non_default_stream",
                   "test_DistributedDataParallel_with_amp_and_grad_is_view",
                   "test_all_gather_coalesced_group", "test_all_gather_group",
                   "test_all_reduce_coalesced_group_max",
                   "test_all_reduce_coalesced_group_min",
                   "test_all_reduce_coalesced_group_product",
                   "test_all_reduce_coalesced_group_sum", "test_all_reduce_group_max",
                   "test_all_reduce_group_min", "test_all_reduce_group_product",
                   "test_all_reduce_group_sum", "test_barrier_group",
                   "test_batch_isend_irecv_mixed_backend_err", "test_batch_isend_irecv_nccl",
                   "test_batch_isend_irecv_no_rank_zero_nccl", "test_batch_isend_irecv_op_err",
                   "test_batch_isend_irecv_op_list_err",
                   "test_batch_isend_irecv_ring_exchange_nccl",
                   "test_batch_isend_irecv_self_nccl", "test_broadcast_group",
                   "test_broadcast_object_list", "test_gather_group", "test_gather_object",
                   "test_gather_object_subgroup", "test_monitored_barrier_allreduce_hang",
                   "test_monitored_barrier_allreduce_hang_wait_all_ranks",
                   "test_monitored_barrier_failure_order",
                   "test_monitored_barrier_wait_all_ranks", "test_reduce_group_max",
                   "test_reduce_group_min", "test_reduce_group_product",
                   "test_reduce_group_sum", "test_scatter_group", "test_send_recv_nccl"}


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """The suite's tests, each on WORLD_SIZE spawned processes (test_distributed_spawn.py)."""

    def setUp(self):
        super().setUp()
        self._spawn_processes()


class Tally(unittest.TextTestResult):
    """Every test's outcome and time, for --json."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}
        self._start = {}

    def startTest(self, test):
        self._start[test.id()] = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, detail=""):
        name = test.id().rsplit(".", 1)[-1]
        self.outcomes[name] = {"outcome": outcome,
                               "seconds": round(time.monotonic() - self._start.get(test.id(),
                                                                                    time.monotonic()), 2),
                               "detail": detail[-2000:]}

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "failed", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failed", "unexpected success")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["tcoll", "gloo"], default="tcoll")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--as", dest="suite_as", choices=["gloo", "mpi"], default="gloo",
                        help="the backend the suite believes it runs (its BACKEND): 'mpi' "
                        "runs the tests it keeps for MPI (CPU all_to_all, and the *_group "
                        "tests below 8 processes) on the backend under test")
    parser.add_argument("-k", action="append", default=[],
                        help="run the tests whose name contains this (or matches it as a "
                        "glob); repeatable")
    parser.add_argument("--exclude", action="append", default=[],
                        help="leave out the tests whose name contains this; repeatable")
    parser.add_argument("--json", help="write every outcome and the counts here")
    parser.add_argument("--ran-in", metavar="JSON",
                        help="run only the tests that ran (passed or failed) in this earlier "
                        "--json file, and count its skipped ones as skipped here: a test's "
                        "skip depends on the world size and the machine, not the backend, so "
                        "the other backend's run at the same world size says which will run")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--ci", action="store_true",
                        help="the subset CI runs (CI_TESTS; with --as mpi CI_TESTS_AS_MPI)")
    args = parser.parse_args()
    if args.ci:
        args.k += CI_TESTS_AS_MPI if args.suite_as == "mpi" else CI_TESTS
        args.exclude += CI_EXCLUDE
    if os.environ.get("TCOLL_SUITE_BACKEND") != args.backend or \
            os.environ.get("WORLD_SIZE") != str(args.world_size) or SUITE_AS != args.suite_as:
        # the rank processes read these from the environment: start again with them set
        os.environ["TCOLL_SUITE_BACKEND"] = args.backend
        os.environ["WORLD_SIZE"] = str(args.world_size)
        os.environ["TCOLL_SUITE_AS"] = args.suite_as
        os.execv(sys.executable, [sys.executable] + sys.argv)

    def selected(name):
        wanted = not args.k or any(k in name or fnmatch.fnmatch(name, k) for k in args.k)
        if args.ci and args.world_size == 2 and name in CI_SKIPPED_AT_2:
            return False
        return wanted and not any(x in name for x in args.exclude)

    earlier = {}
    if args.ran_in:
        with open(args.ran_in) as f:
            earlier = json.load(f)
        if earlier.get("world_size") != args.world_size:
            parser.error(f"{args.ran_in} is a run at world size {earlier.get('world_size')}")
        earlier = earlier["tests"]
    names = sorted(n for n in unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
                   if selected(n))
    carried = {}  # skipped in the earlier run: not run again
    if args.ran_in:
        carried = {n: {"outcome": "skipped", "seconds": 0.0,
                       "detail": "skipped in " + os.path.basename(args.ran_in) + ": " +
                       earlier[n]["detail"]}
                   for n in names if earlier.get(n, {}).get("outcome") == "skipped"}
        names = [n for n in names if n not in carried]
    if args.list:
        print("\n".join(names))
        return 0
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    start = time.monotonic()
    result = unittest.TextTestRunner(resultclass=Tally, verbosity=1).run(suite)
    result.outcomes.update(carried)
    counts = {k: sum(1 for o in result.outcomes.values() if o["outcome"] == k)
              for k in ("passed", "failed", "skipped")}
    summary = {"backend": args.backend, "world_size": args.world_size, "as": args.suite_as,
               "torch": torch.__version__, "seconds": round(time.monotonic() - start, 1), **counts,
               **({"ran_in": os.path.basename(args.ran_in)} if args.ran_in else {})}
    print(f"pytorch_suite: {json.dumps(summary)}")
    for name, o in sorted(result.outcomes.items()):
        if o["outcome"] == "failed":
            print(f"FAILED {name}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**summary, "tests": result.outcomes}, f, indent=1)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
