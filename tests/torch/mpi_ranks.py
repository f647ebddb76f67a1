"""One rank of test_backend.py's emulated nodes over MPI, started by `mpirun`.

    mpirun -np P python mpi_ranks.py OUT_DIR STORE_FILE HOST0 HOST1 ...

Rank r (MPI's rank) takes host name HOSTr (a UTS namespace, as harness.set_hostname), joins
a tcoll process group through STORE_FILE and runs test_backend's body_nodes (allreduce of
several dtypes and ops, the other collectives, a straggler, tcoll's DDP against PyTorch's
on Gloo), then an allreduce on a sub-group of ranks 0, 2 and 3 (on two nodes), and a group
with a 2 s timeout on which the last rank stalls (then calls again on the broken group). It
saves what it got to OUT_DIR/rank{r}.pt
for the test to check. It leaves the group to tcoll's exit handler, which destroys it and
calls MPI_Finalize (mpirun fails the job when a process exits without it).
"""
import datetime
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from harness import set_hostname  # noqa: E402


def main():
    out_dir, store, hosts = sys.argv[1], sys.argv[2], sys.argv[3:]
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    assert size == len(hosts), (size, hosts)
    if not set_hostname(hosts[rank]):
        print("SKIP: cannot make a UTS namespace (not root?)")
        open(os.path.join(out_dir, f"skip{rank}"), "w").close()
        return
    import torch
    import torch.distributed as dist

    import tcoll_torch
    from test_backend import body_nodes, make_input, nodes_cases

    torch.set_num_threads(1)
    dist.init_process_group("tcoll", init_method="file://" + store, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))
    cpu = torch.device("cpu")
    out = body_nodes(rank, size, nodes_cases(), 257)  # its "internode": the WORLD group's
    members = [0, 2, 3]
    sub = dist.new_group(members, backend="tcoll")
    if rank in members:
        y = make_input(rank, 3001, "float32", "SUM", 41)
        dist.all_reduce(y, group=sub)
        out["sub"] = (tcoll_torch._C.internode_of(sub._get_backend(cpu)), y)
    # a rank that stalls on a group with a 2 s timeout: its peers raise within it, on shared
    # memory or MPI, and everyone still exits cleanly
    stalled = dist.new_group(list(range(size)), backend="tcoll",
                             timeout=datetime.timedelta(seconds=2))
    z = torch.rand(100000)
    dist.all_reduce(z, group=stalled)
    if rank == size - 1:
        time.sleep(4)
        out["stall"] = "stalled"
    else:
        start = time.monotonic()
        try:
            dist.all_reduce(z, group=stalled)
            out["stall"] = "no error"
        except Exception as e:  # noqa: BLE001  the message is the result
            out["stall"] = (time.monotonic() - start, str(e))
        try:  # the group is broken now and says so
            dist.all_reduce(z, group=stalled)
            out["broken"] = "no error"
        except Exception as e:  # noqa: BLE001
            out["broken"] = str(e)
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))


if __name__ == "__main__":
    main()
