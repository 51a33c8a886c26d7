"""`TPGroupError`: the one error a tensor-parallel engine raises when its group breaks."""

from __future__ import annotations


class TPGroupError(RuntimeError):
    """A rank of the tensor-parallel group died, failed, or stopped answering.

    Raised on rank 0 (the process that owns the `Engine`) by ``Engine()``, ``Engine.step()``
    and everything after a failure; the message names the rank, its pid and exit code, and ends
    with the failed rank's traceback when it left one. The engine is unusable afterwards: every
    other rank has been stopped.
    """
