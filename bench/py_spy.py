"""`py_spy_record`: sample processes with py-spy while a block runs (a profiler for the benches).

py-spy is not a dependency (``pip install py-spy``); it needs permission to read the processes'
memory (same user, and ptrace allowed). Each process gets one file of collapsed stacks
(``--format raw``: ``frame;frame;... count`` per line, for flamegraph.pl or speedscope), sampled
only while it holds the GIL (``--gil``: Python work and the calls it makes without releasing the
GIL, such as a socket write from uvloop; not time spent waiting).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Iterator, Mapping

from twinserve.core.errors import UserError


def py_spy_binary() -> str:
    """The py-spy executable next to this interpreter or on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    found = here if os.path.exists(here) else shutil.which("py-spy")
    if found is None:
        raise UserError("--py-spy needs the py-spy profiler, which is not installed: pip install py-spy")
    return found


@contextlib.contextmanager
def py_spy_record(pids: Mapping[str, int], out_dir: str, tag: str, rate: int = 500,
                  attach_s: float = 2.0) -> Iterator[list[str]]:
    """Record each of ``pids`` (name -> pid) into ``out_dir/{tag}-{name}.txt`` while the block
    runs; yields the file paths. The block starts ``attach_s`` after the recorders (they take
    a moment to attach); they are stopped (SIGINT: each writes its file) when the block ends,
    however it ends."""
    spy = py_spy_binary()
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, f"{tag}-{name}.txt") for name in pids]
    procs = [subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--gil",
                               "--nonblocking", "-o", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for pid, path in zip(pids.values(), paths)]
    try:
        time.sleep(attach_s)
        yield paths
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
