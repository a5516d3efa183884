"""mpicr's Python module with mpi4py: the first NAPPLES ranks are application-level (save and
restore their own data, `mpicr run --mode app`), the others transparent. A ring of messages sent
one iteration ahead (in flight at every safe point), an allreduce and a broadcast per iteration;
the communicator the program made is kept across a restart as its handle value.
Arguments: ITERS PACE_S NAPPLES. Output: deterministic checksums.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import mpicr  # noqa: E402

st = {}


def out(line):
    """One write per line: print() may write the text and its newline apart, and mpiexec then
    interleaves the ranks' lines."""
    os.write(1, (line + "\n").encode())


def save(d):
    with open(os.path.join(d, "state.json"), "w") as f:
        json.dump(st, f)


def restore(d):
    with open(os.path.join(d, "state.json")) as f:
        st.update(json.load(f))


mpicr.app_register(save, restore)
from mpi4py import MPI  # noqa: E402  (MPI_Init: a restart restores here)

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
iters, pace, napples = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
apple = rank < napples
right, left = (rank + 1) % size, (rank - 1) % size
M = (1 << 61) - 1
if mpicr.restarted():
    comm = MPI.Comm.f2py(st["comm"])
else:
    out(f"app_ring: rank {rank} of {size}, {'apple' if apple else 'orange'}")
    comm = world.Dup()
    st.update(it=0, s=rank * 1000003 + 7, comm=comm.py2f())
    comm.send(st["s"] % 9973, dest=right, tag=0)
while st["it"] < iters:
    it = st["it"]
    if apple:
        mpicr.safe_point()
    time.sleep(pace)
    m = comm.recv(source=left, tag=it)
    s = (st["s"] * 31 + m + it) % M
    total = comm.allreduce(s % 65521, op=MPI.SUM)
    b = comm.bcast(s % 4099 if rank == size - 1 else None, root=size - 1)
    st["s"] = (s ^ total ^ (b << 3)) % M
    if it + 1 < iters:
        comm.send(st["s"] % 9973, dest=right, tag=it + 1)
    if it % 10 == 9:
        out(f"app_ring: rank {rank} iteration {it} state {st['s']}")
    st["it"] = it + 1
out(f"app_ring: rank {rank} final {st['s']}")
comm.Free()
