"""mpicr's C API (include/mpicr.h) for Python programs, mpi4py's included.

    import mpicr                      # before `from mpi4py import MPI` (which calls MPI_Init)
    mpicr.app_register(save, restore) # save(dir) / restore(dir): return None or 0 on success
    from mpi4py import MPI
    if not mpicr.restarted(): ...     # first start: set up
    while ...:
        mpicr.safe_point()            # an app-mode checkpoint may take this rank here

MPI handles to keep across a restart are saved as integers (`comm.py2f()`) and taken back with
`MPI.Comm.f2py(h)` (`MPI.Datatype.f2py`, ...): a restart gives every object its old value.
Outside `mpicr run` (no libmpicr.so in the process) every call does nothing and `restarted()`
is False, so the program runs as a plain MPI program.

Importing this module turns off `mpi4py.rc.fast_reduce`: with it on, mpi4py's pickle-based
`reduce`/`allreduce`/`scan`/`exscan` run over a private duplicate of the communicator and a tag
counter that mpi4py keeps in its own C memory (an attribute), which a restarted app-mode process
cannot get back: its first reduction would duplicate the communicator again, a collective the
other ranks never join (the job hangs). Off, they are MPI collectives on the communicator itself,
which mpicr carries. Every rank of the job must reduce alike, so transparent ranks import this
module too (or set `mpi4py.rc.fast_reduce = False` before `from mpi4py import MPI`).
`mpi4py.util.pkl5` keeps the same kind of private state and is not usable in app-mode ranks.
"""

import ctypes
import sys

if "mpi4py.MPI" in sys.modules:
    print("mpicr: import mpicr before `from mpi4py import MPI` (mpi4py.rc.fast_reduce must be "
          "off before MPI_Init)", file=sys.stderr, flush=True)
else:
    try:
        import mpi4py
        mpi4py.rc.fast_reduce = False
    except ImportError:
        pass

_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_lib = ctypes.CDLL(None)
_keep = []  # the callbacks must live as long as the process


def _sym(name):
    try:
        return getattr(_lib, name)
    except AttributeError:
        return None


_register = _sym("mpicr_app_register")
_safe_point = _sym("mpicr_safe_point")
_restarted = _sym("mpicr_restarted")
_checkpoint = _sym("mpicr_checkpoint")


def supervised():
    """True when libmpicr.so is loaded (the program runs under mpicr)."""
    return _register is not None


def _wrap(f):
    def call(d, _arg):
        try:
            r = f(d.decode())
            return 0 if r is None else int(r)
        except Exception as e:  # a failed save fails the checkpoint, a failed restore the restart
            print(f"mpicr: {f.__name__}: {e!r}", file=sys.stderr, flush=True)
            return 1
    return _FN(call)


def app_register(save, restore):
    """Registers save(dir) and restore(dir) of an application-level rank (`mpicr run --mode
    app`). Call it before MPI_Init (before importing mpi4py's MPI). Returns 0 (also when not
    under mpicr)."""
    if _register is None:
        return 0
    s, r = _wrap(save), _wrap(restore)
    _keep.extend([s, r])
    _register.argtypes = [_FN, _FN, ctypes.c_void_p]
    return _register(s, r, None)


def safe_point():
    """A point where an app-mode checkpoint may take this rank; returns 0."""
    return _safe_point() if _safe_point is not None else 0


def restarted():
    """True in a process restarted from an epoch (its restore already ran)."""
    return bool(_restarted()) if _restarted is not None else False


def checkpoint(stop=False):
    """Asks for a checkpoint of the whole job (0: asked; -1: not under mpicr run)."""
    return _checkpoint(int(bool(stop))) if _checkpoint is not None else -1
