"""Process helpers shared by the engine's tensor-parallel ranks and the server (no heavy imports)."""

from __future__ import annotations

import os


def pid_exists(pid: int) -> bool:
    """Whether a process with this pid exists (one owned by another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
