#!/usr/bin/env python3
"""Runs an unmodified MPI program under mpirun with libtcoll_mpi.so preloaded and checks it.

Modes:
  check    the program must exit 0 under the preload, and world rank 0's TCOLL_DEBUG=1
           summary must be there (the preload was active) and list every --expect; with
           --env=TCOLL_DEBUG=0 there is no summary, and the output must hold every --expect
           text instead (the program's own proof that the preload ran)
           (`MPI_Allreduce ring`: that collective ran that algorithm at least once;
           `fallback:user-defined op`: at least one call fell back for that reason;
           `packed:MPI_Bcast`: rank 0 packed a derived datatype around a tcoll call;
           `large:MPI_Allreduce`: tcoll ran MPI_Allreduce_c calls).
  fail     the program must exit non-zero under the preload with every --expect text in its
           output (a bad TCOLL_* variable).
  compare  the program runs without the preload and with it; the lines starting with
           RESULT must be identical (and the preloaded run must pass the checks of `check`).
Reference runs set OMPI_MCA_op=^avx: Open MPI 4.1.4's AVX ops saturate 8-bit integer sums; under
MPICH, MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE=0 (see below).
"""
import argparse
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile


def run(cmd, env, timeout):
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        print(out[-4000:], err[-4000:])
        sys.exit(f"FAIL: {' '.join(cmd)} did not finish within {timeout} s")
    return p.returncode, p.stdout, p.stderr


def summary_of(text):
    """World rank 0's summary lines (TCOLL_DEBUG=1), without the prefix."""
    lines = [l.split(": ", 1)[1] for l in text.splitlines()
             if l.startswith("tcoll_mpi[rank 0]: ") and ": " in l]
    return lines


def check_summary(text, expects):
    lines = summary_of(text)
    if not any(l.startswith("summary: ") for l in lines):
        print(text[-6000:])
        sys.exit("FAIL: no TCOLL_DEBUG summary from rank 0: the preload was not active")
    head = next(l for l in lines if l.startswith("summary: "))
    m = re.match(r"summary: (\d+) calls through tcoll", head)
    if not m or int(m.group(1)) == 0:
        sys.exit(f"FAIL: no call went through the preload ({head})")
    missing = []
    for expect in expects:
        # "not:X": X must be absent; "COLL ALGO LOW": a call of COLL by ALGO in the size
        # bucket starting at LOW (e.g. 64K; 0: of 0 B)
        absent = expect.startswith("not:")
        e = expect[4:] if absent else expect
        if e.startswith("fallback:"):
            reason = e.split(":", 1)[1]
            ok = any(f"fallback ({reason}): " in l for l in lines)
        elif e.startswith("packed:"):
            # calls of that collective in which rank 0 packed a derived datatype locally
            coll = e.split(":", 1)[1]
            ok = any(re.match(rf"\s*{re.escape(coll)} with a derived datatype packed", l)
                     for l in lines)
        elif e.startswith("large:"):
            # calls of that collective through its MPI-4 large-count entry point run by tcoll
            coll = e.split(":", 1)[1]
            ok = any(re.match(rf"\s*{re.escape(coll)} as {re.escape(coll)}_c \(large count\)", l)
                     for l in lines)
        elif e.startswith("shm:") or e.startswith("no-shm:"):
            # calls of that collective ran over the shared-memory transport (or none did)
            coll = e.split(":", 1)[1]
            ran = any(re.match(rf"\s*{re.escape(coll)} over shared memory", l) for l in lines)
            ok = ran == e.startswith("shm:")
        else:
            coll, algo, *low = e.split()
            # (LOW "0": the calls of 0 B, which ranks of the uneven forms make too)
            where = (r"0 B" if low == ["0"] else rf"\[{re.escape(low[0])},") if low else r"(0 B|\[)"
            ok = any(re.match(rf"\s*{re.escape(coll)} {re.escape(algo)} {where}", l) for l in lines)
        if ok == absent:
            missing.append(expect)
    if missing:
        print("\n".join(lines))
        sys.exit(f"FAIL: the summary lacks {missing}")
    print("\n".join(lines[:1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["check", "fail", "compare"], default="check")
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--mpi-arg", action="append", default=[], help="argument for mpirun (repeat)")
    ap.add_argument("--mpi", choices=["openmpi", "mpich"], default="openmpi",
                    help="the launcher's family: how LD_PRELOAD is handed to the ranks")
    ap.add_argument("--lib", required=True, help="path of libtcoll_mpi.so")
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the ranks (repeat)")
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--no-preload", action="store_true",
                    help="run without LD_PRELOAD (the checks must then fail: a test of the test)")
    ap.add_argument("--library-alias", action="append", default=[], metavar="NAME=PATH",
                    help="the program finds library PATH under the name NAME too (repeat)")
    ap.add_argument("--needs-module", help="skip (exit 77) unless the program's interpreter imports it")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    prog = a.program[1:] if a.program and a.program[0] == "--" else a.program
    if not prog:
        sys.exit("no program given")
    if a.needs_module:
        # the program's own interpreter (the first word of the program) must import it
        probe = subprocess.run([prog[0], "-c", f"import {a.needs_module}"], capture_output=True)
        if probe.returncode != 0:
            print(f"SKIP: {prog[0]} cannot import {a.needs_module} (scripts/setup.sh installs "
                  "Debian's python3-mpi4py for /usr/bin/python3, scripts/setup_torch.sh the "
                  "PyPI wheel into .venv)")
            sys.exit(77)
    if not os.path.exists(a.lib):
        sys.exit(f"FAIL: {a.lib} does not exist")

    env = dict(os.environ)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_op": "^avx", "TCOLL_TIMEOUT": "100"})
    if a.mpi == "mpich":
        # MPICH 4.0-4.1's device-level MPI_Reduce crashes with MPI_IN_PLACE at a root other than
        # 0 on one node (pmodels/mpich#6540, fixed in 4.1.2): the reference runs its generic one
        env["MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE"] = "0"
    for k in [k for k in env if k.startswith("TCOLL_") and k != "TCOLL_TIMEOUT"]:
        del env[k]  # only what this test sets
    for kv in a.env:
        k, v = kv.split("=", 1)
        env[k] = v
    env.setdefault("TCOLL_DEBUG", "1")
    if a.library_alias:  # a directory of symbolic links, first on the library path
        aliases = tempfile.mkdtemp(prefix="tcoll-preload-libs-")
        atexit.register(shutil.rmtree, aliases, ignore_errors=True)
        for alias in a.library_alias:
            name, path = alias.split("=", 1)
            os.symlink(path, os.path.join(aliases, name))
        env["LD_LIBRARY_PATH"] = aliases + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    base = [a.mpirun] + a.mpi_arg + ["-np", str(a.np)]
    # Open MPI's mpirun forwards a variable with -x, MPICH's Hydra with -genv (setting it
    # in mpirun's own environment would preload the launcher too)
    lib = os.path.abspath(a.lib)
    forward = ["-x", f"LD_PRELOAD={lib}"] if a.mpi == "openmpi" else ["-genv", "LD_PRELOAD", lib]
    preload = base + ([] if a.no_preload else forward) + prog

    rc, out, err = run(preload, env, a.timeout)
    text = out + err
    if a.mode == "fail":
        if rc == 0:
            print(text[-6000:])
            sys.exit("FAIL: the program succeeded under the preload; a failure was expected")
        missing = [e for e in a.expect if e not in text]
        if missing:
            print(text[-6000:])
            sys.exit(f"FAIL: the output lacks {missing}")
        print(f"ok: failed as expected (exit {rc}) with {a.expect}")
        return
    if rc != 0:
        print(text[-8000:])
        sys.exit(f"FAIL: exit {rc} under the preload")
    if env["TCOLL_DEBUG"] == "0":  # no summary: the program shows the preload was active
        missing = [e for e in a.expect if e not in text]
        if missing or not a.expect:
            print(text[-6000:])
            sys.exit(f"FAIL: TCOLL_DEBUG=0 and the output lacks {missing or 'an --expect'}")
        print(f"ok: {a.expect}")
        return
    check_summary(text, a.expect)
    if a.mode == "compare":
        plain_env = {k: v for k, v in env.items() if not k.startswith("TCOLL_")}
        rc2, out2, err2 = run(base + prog, plain_env, a.timeout)
        if rc2 != 0:
            print((out2 + err2)[-8000:])
            sys.exit(f"FAIL: exit {rc2} without the preload")
        loaded = [l for l in out.splitlines() if l.startswith("PRELOAD rank")]
        if len(loaded) != a.np or any("not loaded" in l for l in loaded):
            print("\n".join(loaded))
            sys.exit("FAIL: the program's own check (tcoll_mpi_counts) did not find the preload "
                     "on every rank")
        with_pl = sorted(l for l in out.splitlines() if l.startswith("RESULT"))
        without = sorted(l for l in out2.splitlines() if l.startswith("RESULT"))
        if not without:
            sys.exit("FAIL: the program printed no RESULT lines")
        if with_pl != without:
            for x, y in zip(with_pl, without):
                if x != y:
                    print("with preload:   ", x[:300])
                    print("without preload:", y[:300])
            sys.exit(f"FAIL: results differ with the preload ({len(with_pl)} vs {len(without)} lines)")
        print(f"ok: {len(without)} RESULT lines identical with and without the preload")
    for l in out.splitlines():
        if "errors" in l and l.startswith("rank 0"):
            print(l)
    print("ok")


if __name__ == "__main__":
    main()
