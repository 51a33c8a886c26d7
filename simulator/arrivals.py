"""`ArrivalProcess`: feeds a workload's requests into the cluster at their trace times."""

from __future__ import annotations

import math
from typing import Callable, Generator


from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.core.workload import RequestSpec, Workload
from twinserve.simulator.timing import ARRIVAL, At, SimEnvironment


def make_req(workload: Workload, spec: RequestSpec) -> Req:
    """The scheduler's view of one spec: its prompt ids, ``max_tokens = output_len`` with EOS
    ignored (the simulator stops exactly at the trace's length), and the answer ids as the token
    values a sampler-less backend emits."""
    return Req(
        rid=spec.rid,
        prompt=workload.prompt_tokens(spec),
        params=SamplingParams(max_tokens=spec.output_len, ignore_eos=True),
        arrival=spec.arrival,
        priority=spec.priority,
        tenant=spec.tenant,
        output_hint=workload.output_tokens(spec),
    )


class ArrivalProcess:
    """A SimPy process that wakes at each distinct arrival time (priority ``ARRIVAL``, so before
    any step ending at the same instant) and hands every request due then to ``deliver``, in
    workload order. ``Req`` objects are built only at their arrival, so a long trace never holds
    more token arrays than the requests in flight.

    ``next_time()`` is the arrival time of the next request not yet delivered (``inf`` when none):
    replicas use it to bound fast-forward stretches.
    """

    def __init__(self, env: SimEnvironment, workload: Workload,
                 deliver: Callable[[Req, float], None]) -> None:
        self.env = env
        self.workload = workload
        self._deliver = deliver
        self._times = workload.arrivals
        self._i = 0
        self.delivered = 0
        self.process = env.process(self._run())

    @property
    def done(self) -> bool:
        """Every request has been delivered."""
        return self._i >= len(self._times)

    def next_time(self) -> float:
        return float(self._times[self._i]) if self._i < len(self._times) else math.inf

    def _run(self) -> Generator:
        w, times, n = self.workload, self._times, len(self._times)
        while self._i < n:
            t = float(times[self._i])
            if t > self.env.now:
                yield At(self.env, t, ARRIVAL)
            while self._i < n and float(times[self._i]) <= t:
                spec = w[self._i]
                self._i += 1
                self.delivered += 1
                self._deliver(make_req(w, spec), t)
