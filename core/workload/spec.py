"""`RequestSpec`: one request of a workload, before any backend sees it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


def _frozen_int32(a: np.ndarray | list[int], what: str, rid: int) -> np.ndarray:
    arr = np.asarray(a)
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ValueError(f"request {rid}: {what} must be a 1-D integer array")
    if arr.dtype != np.int32:
        arr = arr.astype(np.int32)
    else:
        arr = arr.view()
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What a workload says about one request: when it arrives and how long it is.

    - ``arrival``: seconds on the workload's clock (the first request of a trace usually at 0).
    - ``prompt_len`` / ``output_len``: token counts, both >= 1. ``output_len`` is the number of
      tokens the backends generate (``max_tokens``; the simulator stops exactly there).
    - ``hash_ids``: Mooncake-style block hashes: block ``i`` of the prompt (``block_size`` tokens,
      a property of the `Workload`) is a function of ``hash_ids[i]`` only, so equal hashes mean
      identical token blocks. Tokens past ``len(hash_ids) * block_size`` are unique to the request.
    - ``tokens`` / ``output_tokens``: explicit ids; when given, their lengths must equal
      ``prompt_len`` / ``output_len``. They are stored read-only (int32) and are left out of
      ``==`` and ``hash`` (arrays have no truth value); two specs compare by their scalar fields.
    - ``session``: the multi-turn conversation this request belongs to, if any.
    """

    rid: int
    arrival: float
    prompt_len: int
    output_len: int
    tenant: str = "default"
    priority: int = 0
    session: int | None = None
    hash_ids: tuple[int, ...] | None = None
    tokens: np.ndarray | None = field(default=None, compare=False, repr=False)
    output_tokens: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.prompt_len < 1:
            raise ValueError(f"request {self.rid}: prompt_len must be >= 1, got {self.prompt_len}")
        if self.output_len < 1:
            raise ValueError(f"request {self.rid}: output_len must be >= 1, got {self.output_len}")
        if not math.isfinite(self.arrival) or self.arrival < 0:
            raise ValueError(f"request {self.rid}: arrival must be finite and >= 0, "
                             f"got {self.arrival}")
        if self.hash_ids is not None and not isinstance(self.hash_ids, tuple):
            object.__setattr__(self, "hash_ids", tuple(int(h) for h in self.hash_ids))
        if self.tokens is not None:
            toks = _frozen_int32(self.tokens, "tokens", self.rid)
            if toks.size != self.prompt_len:
                raise ValueError(f"request {self.rid}: {toks.size} tokens but prompt_len "
                                 f"{self.prompt_len}")
            object.__setattr__(self, "tokens", toks)
        if self.output_tokens is not None:
            out = _frozen_int32(self.output_tokens, "output_tokens", self.rid)
            if out.size != self.output_len:
                raise ValueError(f"request {self.rid}: {out.size} output_tokens but output_len "
                                 f"{self.output_len}")
            object.__setattr__(self, "output_tokens", out)

    @property
    def total_len(self) -> int:
        return self.prompt_len + self.output_len
