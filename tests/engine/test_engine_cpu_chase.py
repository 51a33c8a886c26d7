"""The vCPU speed probe and the chaser that keeps the engine's host thread on a fast vCPU (CPU)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from twinserve.engine.config import EngineConfig
from twinserve.engine.cpu_chase import CpuChaser, choose_cpu
from twinserve.engine.cpu_speed import SpeedBoard, diagnose, parse_cpus, probe_loop

CPUS = sorted(os.sched_getaffinity(0))
two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="the chaser needs at least two allowed vCPUs")


def test_parse_cpus_reads_the_kernel_list_syntax():
    assert parse_cpus("0-3,8") == [0, 1, 2, 3, 8]
    assert parse_cpus("5") == [5]
    assert parse_cpus("2,0-1, 1") == [0, 1, 2]


def test_choose_cpu_takes_the_fastest_fresh_vcpu_only_when_clearly_faster():
    unit = np.array([1.6, 1.0, 0.9, 1.5])
    now = 100.0
    fresh = np.full(4, 99.9)
    # unpinned: the fastest fresh vCPU whatever the own speed
    assert choose_cpu(-1, 0.1, unit, fresh, now) == 2
    # pinned to a slow one (own 1.6): vCPU 2 is under 0.8 x 1.6
    assert choose_cpu(0, 1.6, unit, fresh, now) == 2
    # already fast enough: 0.9 is not under 0.8 x 1.0
    assert choose_cpu(1, 1.0, unit, fresh, now) is None
    # the current vCPU's board entry never counts (the probe skips it; it may be stale)
    assert choose_cpu(2, 1.6, unit, fresh, now) == 1
    # stale or never-measured entries are ignored
    stamps = np.array([99.9, 99.9, 90.0, 0.0])
    assert choose_cpu(0, 1.6, unit, stamps, now) == 1
    assert choose_cpu(0, 1.6, unit, np.zeros(4), now) is None
    # only allowed vCPUs are candidates
    assert choose_cpu(0, 1.6, unit, fresh, now, allowed=[0, 3]) is None
    assert choose_cpu(0, 2.0, unit, fresh, now, allowed=[0, 3]) == 3


def test_speed_board_round_trips_between_two_handles(tmp_path):
    path = str(tmp_path / "board")
    w = SpeedBoard(path, 4, create=True)
    r = SpeedBoard(path, 4)
    assert r.engine_cpu == -1 and r.sweeps == 0 and not r.stamps().any()
    w.put(2, 1.5e-4, 123.0)
    w.end_sweep()
    r.engine_cpu = 3
    assert r.unit_s()[2] == 1.5e-4 and r.stamps()[2] == 123.0 and r.sweeps == 1
    assert w.engine_cpu == 3


@two_cpus
def test_probe_loop_skips_the_engines_vcpu(tmp_path):
    board = SpeedBoard(str(tmp_path / "board"), max(CPUS) + 1, create=True)
    board.engine_cpu = CPUS[0]
    th = threading.Thread(target=probe_loop, args=(board, CPUS, 0.02), kwargs=dict(stop_after_s=0.3))
    th.start()
    th.join(10)
    assert board.sweeps >= 2
    st, us = board.stamps(), board.unit_s()
    assert st[CPUS[0]] == 0.0  # never measured: the engine's thread is not to be preempted
    assert all(st[c] > 0 and 0 < us[c] < 0.1 for c in CPUS[1:])


def test_diagnose_reports_every_vcpu():
    reports, any_fast, n = diagnose(CPUS, 0.2)
    assert [r.cpu for r in reports] == CPUS and n >= 1
    assert all(r.median_ms > 0 and 0.0 <= r.fast_share <= 1.0 for r in reports)
    assert any_fast > 0.0  # the sweep holding the run's fastest unit has a fast vCPU
    assert os.sched_getaffinity(0) == set(CPUS)  # the calling thread is not left pinned


def _wait_sweeps(ch: CpuChaser, n: int, timeout_s: float = 30.0) -> None:
    t = time.time()
    while ch.sweeps < n:
        assert time.time() - t < timeout_s, "the probe process wrote no sweeps"
        time.sleep(0.02)


@two_cpus
def test_chaser_pins_the_ticking_thread_and_restores_it():
    result: dict = {}

    def body() -> None:  # in its own thread, so that a failure cannot leave pytest pinned
        ch = CpuChaser(interval_s=0.0, period_s=0.02)
        try:
            assert ch.active
            _wait_sweeps(ch, 2)
            ch.tick()  # unpinned: moves to the fastest measured vCPU
            result["cpu"], result["mask"], result["moves"] = ch.cpu, os.sched_getaffinity(0), ch.moves
            result["board_cpu"] = ch._board.engine_cpu
        finally:
            proc = ch._proc
            ch.close()
            ch.close()  # idempotent
            result["after"] = os.sched_getaffinity(0)
            result["proc_rc"] = proc.poll() if proc is not None else "none"

    th = threading.Thread(target=body)
    th.start()
    th.join(60)
    assert result["cpu"] in CPUS and result["mask"] == {result["cpu"]} and result["moves"] == 1
    assert result["board_cpu"] == result["cpu"]  # the probe is told to keep off it
    assert result["after"] == set(CPUS)
    assert result["proc_rc"] is not None  # the probe process has ended


def test_chaser_is_inactive_with_one_allowed_vcpu():
    result: dict = {}

    def body() -> None:
        os.sched_setaffinity(0, {CPUS[0]})
        ch = CpuChaser(interval_s=0.0)
        ch.tick()
        result.update(active=ch.active, cpu=ch.cpu, sweeps=ch.sweeps)
        ch.close()

    th = threading.Thread(target=body)
    th.start()
    th.join(30)
    assert result == dict(active=False, cpu=-1, sweeps=0)


@two_cpus
def test_engine_with_cpu_chase_records_the_host_vcpu(tiny_model_dir):
    from twinserve.core.request import Req
    from twinserve.core.sampling import SamplingParams
    from twinserve.engine.engine import Engine

    result: dict = {}

    def body() -> None:
        eng = Engine(EngineConfig(model=str(tiny_model_dir("tiny-llama")), device="cpu", cpu_kv_tokens=2048,
                                  cache="none", cpu_chase=True))
        eng.chaser.interval_s = 0.0
        _wait_sweeps(eng.chaser, 2)
        eng.add(Req(1, np.arange(3, 20, dtype=np.int32), SamplingParams(max_tokens=6, ignore_eos=True)))
        while eng.has_work():
            eng.step()
        result["cpus"] = [r.extra["host_cpu"] for r in eng.steps]
        proc = eng.chaser._proc
        eng.shutdown()
        result["closed"] = proc.poll() is not None and not eng.chaser.active
        result["after"] = os.sched_getaffinity(0)

    th = threading.Thread(target=body)
    th.start()
    th.join(120)
    assert len(result["cpus"]) == 6 and all(c in CPUS for c in result["cpus"])
    assert result["closed"] and result["after"] == set(CPUS)


@two_cpus
def test_chaser_leaves_a_vcpu_that_another_process_keeps_busy():
    """A CPU-bound process pinned to one vCPU halves the speed there: the chaser moves the
    ticking thread to the other vCPU, and back when the busy process moves."""
    import subprocess
    import sys

    a, b = CPUS[0], CPUS[1]
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    result: dict = {}

    def follow(ch: CpuChaser, avoid: int, timeout_s: float = 20.0) -> int:
        t = time.time()
        while time.time() - t < timeout_s:
            ch.tick()
            if ch.cpu not in (-1, avoid):
                return ch.cpu
            time.sleep(0.01)
        return ch.cpu

    def body() -> None:
        os.sched_setaffinity(burner.pid, {a})
        ch = CpuChaser(interval_s=0.05, period_s=0.02)
        try:
            _wait_sweeps(ch, 3)
            os.sched_setaffinity(0, {a})  # start on the busy vCPU
            ch.cpu = a
            ch._board.engine_cpu = a
            result["first"] = follow(ch, avoid=a)
            os.sched_setaffinity(burner.pid, {b})  # the load moves to where the thread now is
            result["second"] = follow(ch, avoid=b)
        finally:
            ch.close()

    try:
        th = threading.Thread(target=body)
        th.start()
        th.join(90)
    finally:
        burner.kill()
        burner.wait()
    assert result == {"first": b, "second": a}
