"""Which MPI functions a program can use and still be checkpointed: the "checkpointable" column
of docs/api-buckets.md and the count in the README.

A function is *not* checkpointable when what it makes or starts is refused at checkpoint time
(the `refusal` of the object kinds in shim/src/core/kinds/, each with its run-time message), or
when it works only on such objects. Kept in step with those refusals by hand: when a kind
becomes checkpointable, remove its lines here and run `make gen`.
"""
import re

# (pattern on the function name, when a checkpoint is refused). First match wins.
REFUSED = [
    (r"MPI_Comm_(spawn|spawn_multiple|connect|accept|join)$",
     "the communicator reaches processes outside the job: a restart cannot bring them back"),
    (r"MPI_Grequest_(start|complete)$",
     "while the generalized request is pending: the program's own callbacks complete it"),
    (r"MPI_(Isendrecv(_replace)?(_c)?|Buffer_iflush|Comm_iflush_buffer)$", "while the request is pending"),
    (r"MPI_Session_iflush_buffer$", "while the request is pending"),
]

_COMPILED = [(re.compile(p), why) for p, why in REFUSED]


def refused(name):
    """None when a program using `name` can be checkpointed, else when it cannot."""
    for pat, why in _COMPILED:
        if pat.match(name):
            return why
    return None
