"""`Req`: one request's tokens, KV bookkeeping, state and timestamps."""

from __future__ import annotations

from enum import Enum
from typing import Any

import numpy as np

from twinserve.core.sampling import SamplingParams

PLACEHOLDER = -1  # a sampled token whose value has not arrived yet (overlap scheduling)


class ReqState(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


class Req:
    """A request as the scheduler sees it.

    Tokens live in one int32 buffer: ``tokens[:prompt_len]`` is the prompt and
    ``tokens[prompt_len:num_tokens]`` the outputs so far; an output may be ``PLACEHOLDER`` between
    the step that samples it and the ``complete()`` that delivers its value. ``num_computed``
    tokens have KV in the pool (``num_cached`` of them came from the prefix cache at the latest
    admission); ``pages`` cover at least ``num_computed`` tokens, the first ``num_cache_pages`` of
    them owned by the prefix cache (locked through ``cache_node``), the rest owned by this request.
    Prefill vs decode is derived: a decode step computes the single last token of a request that
    already has output. ``token_times[i]`` is when output ``i`` became known. ``output_hint``:
    the answer a replayed trace recorded; the simulator emits it, and so does the engine's
    trace replay (in place of sampling), so that a later turn that quotes it hits the cache.

    Invariant: a FINISHED or ABORTED request with ``inflight == 0`` holds no pages and no lock.
    """

    __slots__ = (
        "rid", "prompt_len", "params", "arrival", "priority", "tenant", "output_hint", "user",
        "tokens", "num_tokens", "num_computed", "num_cached", "pages", "num_cache_pages",
        "cache_node", "state", "inflight", "pending", "t_scheduled", "t_first_token", "t_finish",
        "_times", "finish_reason", "num_preemptions", "reserved_pages", "max_cached",
    )

    def __init__(
        self,
        rid: int,
        prompt: np.ndarray | list[int],
        params: SamplingParams,
        arrival: float = 0.0,
        priority: int = 0,
        tenant: str = "default",
        output_hint: np.ndarray | None = None,
        user: Any = None,
    ) -> None:
        prompt = np.asarray(prompt, dtype=np.int32)
        if prompt.ndim != 1 or prompt.size == 0:
            raise ValueError(f"request {rid}: prompt must be a non-empty 1-D token array")
        self.rid = rid
        self.prompt_len = int(prompt.size)
        self.params = params
        self.arrival = float(arrival)
        self.priority = int(priority)
        self.tenant = tenant
        self.output_hint = output_hint
        self.user = user  # backend-owned payload (e.g. the server's stream handle); never read here
        cap = self.prompt_len + min(params.max_tokens, 64) + 1
        self.tokens = np.empty(cap, dtype=np.int32)
        self.tokens[: self.prompt_len] = prompt
        self.num_tokens = self.prompt_len
        self.num_computed = 0
        self.num_cached = 0
        self.max_cached = 0
        self.pages: list[int] = []
        self.num_cache_pages = 0
        self.cache_node: Any = None
        self.state = ReqState.WAITING
        self.inflight = 0
        self.pending = 0
        self.t_scheduled: float | None = None
        self.t_first_token: float | None = None
        self.t_finish: float | None = None
        self._times = np.empty(min(params.max_tokens, 64) + 1, dtype=np.float64)
        self.finish_reason: str | None = None
        self.num_preemptions = 0
        self.reserved_pages = 0

    # ---- derived views -------------------------------------------------------------------
    @property
    def prompt(self) -> np.ndarray:
        return self.tokens[: self.prompt_len]

    @property
    def output_ids(self) -> np.ndarray:
        return self.tokens[self.prompt_len : self.num_tokens]

    @property
    def num_output(self) -> int:
        return self.num_tokens - self.prompt_len

    @property
    def token_times(self) -> np.ndarray:
        return self._times[: self.num_output]

    @property
    def remaining(self) -> int:
        """Known tokens without KV yet."""
        return self.num_tokens - self.num_computed

    @property
    def is_decode(self) -> bool:
        return self.num_tokens - self.num_computed == 1 and self.num_tokens > self.prompt_len

    @property
    def done(self) -> bool:
        return self.state is ReqState.FINISHED or self.state is ReqState.ABORTED

    @property
    def total_len_bound(self) -> int:
        return self.prompt_len + self.params.max_tokens

    # ---- mutation used by the scheduler -------------------------------------------------
    def append_tokens(self, values: np.ndarray | int, n: int = 1) -> int:
        """Append ``n`` outputs (placeholders or values); returns the first new output index."""
        need = self.num_tokens + n
        if need > self.tokens.size:
            cap = max(need, min(2 * self.tokens.size, self.total_len_bound + 1))
            buf = np.empty(cap, dtype=np.int32)
            buf[: self.num_tokens] = self.tokens[: self.num_tokens]
            self.tokens = buf
        first = self.num_tokens - self.prompt_len
        self.tokens[self.num_tokens : need] = values
        self.num_tokens = need
        if self._times.size < first + n:
            cap = max(first + n, min(2 * self._times.size, self.params.max_tokens + 1))
            tb = np.empty(cap, dtype=np.float64)
            tb[:first] = self._times[:first]
            self._times = tb
        return first

    def append_placeholder(self) -> int:
        """Append one output whose value is not known yet; returns its output index."""
        n = self.num_tokens
        if n < self.tokens.size and n - self.prompt_len < self._times.size:
            self.tokens[n] = PLACEHOLDER
            self.num_tokens = n + 1
            return n - self.prompt_len
        return self.append_tokens(PLACEHOLDER)

    def append_outputs(self, values: np.ndarray | int, times: np.ndarray) -> None:
        """Append ``len(times)`` known outputs with their times (fast-forwarded decodes)."""
        k = times.size
        first = self.append_tokens(values, k)
        self._times[first : first + k] = times
        if first == 0 and self.t_first_token is None:
            self.t_first_token = float(times[0])

    def set_output(self, index: int, value: int, when: float) -> None:
        self.tokens[self.prompt_len + index] = value
        self._times[index] = when
        if index == 0 and self.t_first_token is None:
            self.t_first_token = when

    def set_times(self, first_index: int, times: np.ndarray) -> None:
        self._times[first_index : first_index + times.size] = times
        if first_index == 0 and self.t_first_token is None and times.size:
            self.t_first_token = float(times[0])

    def truncate_outputs(self, n_outputs: int) -> None:
        """Drop outputs after the first ``n_outputs`` (tokens sampled past a stop)."""
        self.num_tokens = min(self.num_tokens, self.prompt_len + n_outputs)

    def __repr__(self) -> str:
        return (f"Req(rid={self.rid}, state={self.state.value}, prompt={self.prompt_len}, "
                f"out={self.num_output}, computed={self.num_computed}, pages={len(self.pages)})")
