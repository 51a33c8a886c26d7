"""The fidelity suite's workloads and run plan: each workload's overrides, how an offered load
becomes its ``workload.rate``, and the (workload, load) pairs in run order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

LOADS: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9)


@dataclass(frozen=True, slots=True)
class SuiteWorkload:
    """One workload of the suite: its overrides, how a load becomes its ``rate`` override
    (``per_rate`` requests/s per unit of ``workload.rate``), and the calibration replay's
    overrides (a different trace window or seed than the measured runs)."""

    name: str
    overrides: tuple[str, ...]
    per_rate: float = 1.0
    calib: tuple[str, ...] = ()


SUITE: tuple[SuiteWorkload, ...] = (
    SuiteWorkload("azure_conv", ("workload=azure_conv", "workload.start_s=900"),
                  calib=("workload=azure_conv", "workload.start_s=2400")),
    SuiteWorkload("azure_code", ("workload=azure_code", "workload.start_s=900"),
                  calib=("workload=azure_code", "workload.start_s=2400")),
    SuiteWorkload("shared_prefix", ("workload=shared_prefix", "workload.num_requests=null"),
                  calib=("workload=shared_prefix", "workload.num_requests=null", "seed=7")),
    SuiteWorkload("sessions", ("workload=sessions", "workload.think_time=2", "workload.num_sessions=2000"),
                  per_rate=0.0,  # measured from the generator (turns per session start)
                  calib=("workload=sessions", "workload.think_time=2", "workload.num_sessions=2000", "seed=7")),
)


# The Mooncake conversation trace (long prompts, shared prefixes): measured windows after its first
# 10 minutes, calibration replays from its second half hour; prompts of at most 28,000 tokens.
MOONCAKE: tuple[SuiteWorkload, ...] = (
    SuiteWorkload("mooncake_conv", ("workload=mooncake_conv", "workload.start_s=600",
                                    "workload.max_prompt_tokens=28000"),
                  calib=("workload=mooncake_conv", "workload.start_s=1800", "workload.max_prompt_tokens=28000")),
)


@dataclass(frozen=True, slots=True)
class Suite:
    """A named suite: its workloads, the loads each is served at (fractions of its measured
    capacity) and the profiler grid of its calibration profile (`engine.profiler.GRIDS`)."""

    workloads: tuple[SuiteWorkload, ...]
    loads: tuple[float, ...] = LOADS
    grid: str = "full"


SUITES: dict[str, Suite] = {"standard": Suite(SUITE), "mooncake": Suite(MOONCAKE, (0.4, 0.75), "long")}


def compose(overrides: Sequence[str]) -> Any:
    from twinserve.experiments.compare import compose_config

    return compose_config(list(overrides))


def build_suite_workload(overrides: Sequence[str]) -> Any:
    from twinserve.experiments.build import build_workload, model_shape, plain

    cfg = plain(compose(overrides))
    return build_workload(cfg["workload"], model_shape(cfg["model"]).vocab_size)


def requests_per_rate(w: SuiteWorkload, base: Sequence[str], window_s: float) -> float:
    """Requests per second per unit of ``workload.rate`` over the first ``window_s`` seconds (1
    for request-rate workloads; for sessions it grows with the window as later turns arrive)."""
    if w.per_rate > 0:
        return w.per_rate
    probe = 20.0  # session starts per second in the probe: enough sessions to average over
    wl = build_suite_workload([*base, *w.overrides, f"workload.rate={probe:g}", f"workload.duration_s={window_s:g}"])
    return len(wl) / window_s / probe


def load_overrides(w: SuiteWorkload, base: Sequence[str], req_rate: float, duration_s: float,
                   requests: int | None = None) -> list[str]:
    """The overrides of one measured run at ``req_rate`` requests/s for ``duration_s`` trace
    seconds, or, with ``requests``, of its first ``requests`` requests at that rate (a count
    that does not depend on the measured capacity)."""
    return [*base, *w.overrides, *rate_overrides(w, base, req_rate, duration_s, requests)]


def rate_overrides(w: SuiteWorkload, base: Sequence[str], req_rate: float, duration_s: float,
                   requests: int | None = None) -> list[str]:
    """``workload.rate`` for ``req_rate`` requests/s, and the trace seconds or request count."""
    window = duration_s if requests is None else requests / req_rate
    rate = f"workload.rate={req_rate / requests_per_rate(w, base, window):.6g}"
    if requests is None:
        return [rate, f"workload.duration_s={duration_s:g}"]
    return [rate, f"workload.num_requests={requests}"]


def run_plan(only: Sequence[str] = (), suite: Suite = SUITES["standard"]) -> list[tuple[SuiteWorkload, float]]:
    """(workload, load) pairs in run order: every load below 90 % of every workload, then the
    loads from 90 % up; ``only`` keeps the named ones (``azure_conv_90`` ...)."""
    ws = suite.workloads
    plan = [(w, ld) for ld in suite.loads if ld < 0.9 for w in ws] + [(w, ld) for ld in suite.loads if ld >= 0.9 for w in ws]
    if only:
        names = {f"{w.name}_{round(ld * 100)}" for w, ld in plan}
        unknown = sorted(set(only) - names)
        if unknown:
            raise ValueError(f"unknown suite runs {unknown}; known: {sorted(names)}")
        plan = [(w, ld) for w, ld in plan if f"{w.name}_{round(ld * 100)}" in set(only)]
    return plan


