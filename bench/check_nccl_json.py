#!/usr/bin/env python3
"""Runs allreduce_perf with -J (nccl-tests' JSON layout) and --json (tcoll's records) in
one run and checks that the -J file has nccl-tests' version-3 structure and says the same
as the tcoll records: one result per (algorithm, type, op, size), times and bandwidths
equal, every rank listed. Exit status 1 with the reason on the first difference.

usage: check_nccl_json.py ALLREDUCE_PERF"""
import json
import os
import subprocess
import sys
import tempfile


def fail(message):
    print("check_nccl_json: " + message, file=sys.stderr)
    sys.exit(1)


def main():
    perf = sys.argv[1]
    ranks = 3
    with tempfile.TemporaryDirectory() as tmp:
        nccl_path = os.path.join(tmp, "nccl.json")
        tcoll_path = os.path.join(tmp, "tcoll.json")
        cmd = [perf, "-t", "threads", "-g", str(ranks), "-b", "8", "-e", "4K", "-f", "8",
               "-n", "2", "-w", "1", "-d", "float,int32", "-o", "sum,max",
               "-a", "ring,recursive_doubling", "-J", nccl_path, "--json", tcoll_path]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            fail("allreduce_perf exited %d: %s" % (run.returncode, run.stderr))
        with open(nccl_path) as f:
            doc = json.load(f)  # strict JSON or an exception
        with open(tcoll_path) as f:
            records = json.load(f)

    for key in ["version", "start_time", "args", "env", "nccl_version", "config", "results",
                "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"]:
        if key not in doc:
            fail("top-level key %r missing" % key)
    if doc["version"] != 3:
        fail("version is %r, not 3" % doc["version"])
    if doc["args"][-4:] != ["-J", nccl_path, "--json", tcoll_path]:
        fail("args do not end with the command line's: %r" % doc["args"][-4:])
    config = doc["config"]
    for key in ["nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_factor",
                "warmup_iters", "iterations", "validation", "devices"]:
        if key not in config:
            fail("config key %r missing" % key)
    if (config["minimum_bytes"], config["maximum_bytes"], config["iterations"],
            config["warmup_iters"]) != (8, 4096, 2, 1):
        fail("config does not match the command line: %r" % config)
    if [d["rank"] for d in config["devices"]] != list(range(ranks)):
        fail("devices list ranks %r, not 0..%d" % ([d["rank"] for d in config["devices"]],
                                                   ranks - 1))

    expected = {}
    for r in records:
        placement = "in_place" if r["inplace"] else "out_of_place"
        key = (r["algorithm"], r["dtype"], r["op"], r["bytes"])
        expected.setdefault(key, {})[placement] = r
    results = doc["results"]
    if len(results) != len(expected):
        fail("%d results, the tcoll records have %d (algorithm, type, op, size)"
             % (len(results), len(expected)))
    for res in results:
        for key in ["size", "count", "type", "redop", "root", "out_of_place", "in_place",
                    "actual_iterations", "experiment_name"]:
            if key not in res:
                fail("result key %r missing in %r" % (key, res))
        if res["root"] != "    -1":
            fail("root is %r, nccl-tests writes allreduce's as '    -1'" % res["root"])
        key = (res["experiment_name"], res["type"], res["redop"], res["size"])
        if key not in expected:
            fail("result %r has no tcoll record" % (key,))
        for placement in ["out_of_place", "in_place"]:
            got, want = res[placement], expected[key][placement]
            for nccl_key, tcoll_key in [("time", "time_us"), ("alg_bw", "algbw_gbs"),
                                        ("bus_bw", "busbw_gbs")]:
                if abs(got[nccl_key] - want[tcoll_key]) > 1e-4 * max(1.0, abs(want[tcoll_key])):
                    fail("%r %s %s: %r here, %r in the tcoll record"
                         % (key, placement, nccl_key, got[nccl_key], want[tcoll_key]))
            if got["nwrong"] != want["wrong"]:
                fail("%r %s nwrong %r vs %r" % (key, placement, got["nwrong"], want["wrong"]))
        if res["count"] != expected[key]["out_of_place"]["count"]:
            fail("%r count %r" % (key, res["count"]))
    if doc["out_of_bounds"] != {"count": 0, "okay": "true"}:
        fail("out_of_bounds is %r" % doc["out_of_bounds"])
    print("check_nccl_json: %d results, %d ranks, nccl-tests v3 layout, equal to the tcoll "
          "records" % (len(results), ranks))


if __name__ == "__main__":
    main()
