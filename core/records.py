"""`StepRecord`: what one step did. Both backends write one per step into steps.parquet."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from twinserve.core.batch import BatchFeatures


@dataclass(slots=True)
class StepRecord:
    """One executed step.

    ``start`` and ``duration`` are seconds on the backend's clock (simulated or measured; on GPU
    the duration comes from device events). ``cpu_s`` is the host time spent in schedule() and
    complete() for this step. Page counts and queue lengths are read right after scheduling.
    ``as_row()`` flattens the features into one tidy row.
    """

    step: int
    start: float
    duration: float
    features: BatchFeatures
    num_waiting: int
    num_running: int
    free_pages: int
    used_pages: int
    cached_pages: int
    num_preempted: int = 0
    cpu_s: float = 0.0
    replica: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def as_row(self) -> dict[str, float | int]:
        row: dict[str, float | int] = {
            "step": self.step,
            "replica": self.replica,
            "start": self.start,
            "duration": self.duration,
        }
        row.update(asdict(self.features))
        row.update(
            num_waiting=self.num_waiting,
            num_running=self.num_running,
            free_pages=self.free_pages,
            used_pages=self.used_pages,
            cached_pages=self.cached_pages,
            num_preempted=self.num_preempted,
            cpu_s=self.cpu_s,
        )
        row.update(self.extra)
        return row
