"""The vCPU speed diagnostic (`bench.cpu_speed`)."""

from __future__ import annotations

import os

from twinserve.bench.cpu_speed import diagnose, main, parse_cpus

CPUS = sorted(os.sched_getaffinity(0))


def test_parse_cpus_reads_the_kernel_list_syntax():
    assert parse_cpus("0-3,8") == [0, 1, 2, 3, 8]
    assert parse_cpus("5") == [5]
    assert parse_cpus("2,0-1, 1") == [0, 1, 2]


def test_diagnose_reports_every_vcpu():
    reports, any_fast, n = diagnose(CPUS, 0.2)
    assert [r.cpu for r in reports] == CPUS and n >= 1
    assert all(r.median_ms > 0 and 0.0 <= r.fast_share <= 1.0 for r in reports)
    assert any_fast > 0.0  # the sweep holding the run's fastest unit has a fast vCPU
    assert os.sched_getaffinity(0) == set(CPUS)  # the calling thread is not left pinned


def test_the_cli_prints_one_line_per_vcpu(capsys):
    main(["--cpus", str(CPUS[0]), "--seconds", "0.05"])
    out = capsys.readouterr().out
    assert f"cpu {CPUS[0]:3d}  median" in out and "at least one vCPU fast" in out
