"""A failed rank brings the whole group down with a clear error, never a silent hang.

- a follower killed mid-generation: the next step raises TPGroupError naming rank 1, its pid
  and exit code within seconds, and keeps raising it;
- a follower that stops answering (SIGSTOP): the collective times out after tp_timeout_s and
  rank 0 raises TPGroupError; the stuck follower is killed;
- rank 0 killed: the follower notices and exits by itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.engine.engine import Engine, EngineConfig
from twinserve.engine.testing import random_prompts
from twinserve.engine.tp.errors import TPGroupError

BOUND_S = 10.0


def _gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie left for init to reap counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def _engine(d, **kw) -> Engine:
    eng = Engine(EngineConfig(model=str(d), device="cpu", cpu_kv_tokens=4096, tp_size=2, **kw))
    for i, p in enumerate(random_prompts([30, 12, 50], seed=5)):
        eng.add(Req(i, p, SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)))
    return eng


def _step_until_error(eng: Engine, bound_s: float) -> tuple[TPGroupError, float]:
    t0 = time.monotonic()
    with pytest.raises(TPGroupError) as info:
        while time.monotonic() - t0 < bound_s and eng.has_work():
            eng.step()
    return info.value, time.monotonic() - t0


def test_killed_follower_fails_the_group_fast(tiny_dir):
    eng = _engine(tiny_dir("tiny-llama"))
    pid = eng.tp_pids()[1]
    try:
        for _ in range(3):
            eng.step()
        os.kill(pid, signal.SIGKILL)
        err, took = _step_until_error(eng, BOUND_S)
        assert took < BOUND_S
        assert f"rank 1 (pid {pid}) exited with code -9" in str(err)
        with pytest.raises(TPGroupError):  # the engine stays failed
            eng.step()
    finally:
        eng.shutdown()
    assert _wait_gone(pid, 5)


def test_unresponsive_follower_times_out(tiny_dir):
    eng = _engine(tiny_dir("tiny-llama"), tp_timeout_s=2.0)
    pid = eng.tp_pids()[1]
    try:
        eng.step()
        os.kill(pid, signal.SIGSTOP)
        err, took = _step_until_error(eng, 2.0 + BOUND_S)
        assert took < 2.0 + BOUND_S
        assert "stopped answering" in str(err) and "Timed out" in str(err)
    finally:
        eng.shutdown()
    assert _wait_gone(pid, 5), "the stopped follower must be killed with the group"


def test_follower_exits_when_rank0_dies(tiny_dir, tmp_path):
    script = textwrap.dedent(f"""
        import os, sys, torch
        torch.set_num_threads(1)
        from twinserve.engine.engine import Engine, EngineConfig
        eng = Engine(EngineConfig(model={str(tiny_dir("tiny-llama"))!r}, device="cpu",
                                  cpu_kv_tokens=1024, tp_size=2))
        print(eng.tp_pids()[1], flush=True)
        os.kill(os.getpid(), 9)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    follower = int(proc.stdout.strip().splitlines()[-1])
    assert _wait_gone(follower, BOUND_S), "the follower outlived rank 0"


def test_startup_guard_ends_a_blocked_startup():
    """Rank 0 blocked in CUDA at startup cannot raise by itself: the guard stops the group and,
    if rank 0 stays blocked, ends the process with a clear message instead of hanging."""
    script = textwrap.dedent("""
        import time
        from twinserve.engine.tp.startup_guard import StartupGuard
        g = StartupGuard(lambda: (1, 4242, -9), lambda: print("on_failure", flush=True),
                         timeout_s=60, grace_s=0.5, period_s=0.05,
                         where=lambda: "rank 1 is at graph capture of decode 64")
        time.sleep(30)  # a startup that never finishes
    """)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert time.monotonic() - t0 < 15
    assert proc.returncode == 70
    assert "on_failure" in proc.stdout
    assert "rank 1 (pid 4242) exited with code -9 during startup (rank 1 is at graph capture of decode 64)" in proc.stderr


def test_startup_is_bounded_by_its_own_timeout(tiny_dir):
    """A follower that cannot join within ``tp_start_timeout_s`` fails the group with that name;
    ``tp_timeout_s`` bounds steps and collectives only, so a step limit shorter than a follower's
    start (Python and torch alone take over half a second here) does not cut the startup."""
    t0 = time.monotonic()
    with pytest.raises(TPGroupError, match=r"did not join the group within tp_start_timeout_s=0.05 s"):
        _engine(tiny_dir("tiny-llama"), tp_start_timeout_s=0.05)
    assert time.monotonic() - t0 < BOUND_S
    eng = _engine(tiny_dir("tiny-llama"), tp_timeout_s=0.5)
    try:
        assert eng.tp_pids()[1] > 0
    finally:
        eng.shutdown()
