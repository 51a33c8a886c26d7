"""`Workload`: an arrival-ordered list of request specs and the token ids they stand for."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, overload

import numpy as np
import pandas as pd

from twinserve.core.workload import tokens as tk
from twinserve.core.workload.spec import RequestSpec


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclasses.dataclass(frozen=True, slots=True)
class DropCount:
    """What one filter removed: its ``limit``, how many requests it ``dropped`` and ``kept``, and
    the first dropped ids (at most ten)."""

    limit: int
    dropped: int
    kept: int
    first_ids: tuple[int, ...] = ()


class Workload:
    """Requests sorted by arrival (stable: equal arrivals keep their given order), unique ``rid``s.

    Token ids are made on demand, never stored for a whole trace: ``prompt_tokens(spec)`` returns
    the explicit ids when the spec has them, else the blocks named by its ``hash_ids`` (block ``i``
    depends only on ``(seed, hash_ids[i])``; equal hashes give identical blocks; tokens past the
    hashed blocks are unique to the request), else unique pseudo-random ids from ``(seed, rid)``.
    ``output_tokens(spec)`` likewise gives the answer a backend without a sampler emits. All ids
    lie in ``[0, vocab_size)``; explicit ids at or above ``vocab_size`` are folded in by
    ``id % vocab_size`` (equal ids stay equal, so shared prefixes stay shared). Generated ids may
    hit a model's EOS id: replay with ``ignore_eos=True`` (as vLLM's benchmark does).

    Workloads are immutable; every transformation (``head``, ``window``, ``scale_time``, ...)
    returns a new one with the same ``seed``, so a request keeps its tokens when the trace is
    sliced or rescaled. Arrays returned by the token methods must not be written to.
    ``filters`` records what filters removed (a read-only mapping, filter name -> `DropCount`),
    carried unchanged by every transformation.
    """

    def __init__(self, specs: Iterable[RequestSpec], name: str = "workload", seed: int = 0,
                 vocab_size: int = 32000, block_size: int = 512,
                 filters: Mapping[str, DropCount] | None = None) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        specs = list(specs)
        arr = np.fromiter((s.arrival for s in specs), dtype=np.float64, count=len(specs))
        if arr.size > 1 and not np.all(arr[1:] >= arr[:-1]):
            order = np.argsort(arr, kind="stable")
            specs = [specs[i] for i in order]
            arr = arr[order]
        self._specs: list[RequestSpec] = specs
        self._index = {s.rid: i for i, s in enumerate(specs)}
        if len(self._index) != len(specs):
            raise ValueError(f"workload '{name}': request ids are not unique")
        self._arrival = _readonly(arr)
        self._prompt = _readonly(np.fromiter((s.prompt_len for s in specs), np.int64, len(specs)))
        self._output = _readonly(np.fromiter((s.output_len for s in specs), np.int64, len(specs)))
        self.name = name
        self.seed = int(seed)
        self.vocab_size = int(vocab_size)
        self.block_size = int(block_size)
        self.filters: Mapping[str, DropCount] = MappingProxyType(dict(filters or {}))
        top = -1
        for s in specs:
            for a in (s.tokens, s.output_tokens):
                if a is not None and a.size:
                    top = max(top, int(a.max()))
                    if int(a.min()) < 0:
                        raise ValueError(f"request {s.rid}: negative explicit token id")
        self._fold = top >= self.vocab_size
        longest = int(max(self._prompt.max(), self._output.max())) if specs else 0
        self._maker = tk.TokenMaker(self.seed, self.vocab_size, self.block_size, longest)

    # ---- sequence protocol ------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[RequestSpec]:
        return iter(self._specs)

    @overload
    def __getitem__(self, i: int) -> RequestSpec: ...
    @overload
    def __getitem__(self, i: slice) -> Workload: ...
    def __getitem__(self, i: int | slice) -> RequestSpec | Workload:
        if isinstance(i, slice):
            return self._derive(self._specs[i])
        return self._specs[i]

    def by_rid(self, rid: int) -> RequestSpec:
        return self._specs[self._index[rid]]

    def __repr__(self) -> str:
        span = float(self._arrival[-1] - self._arrival[0]) if len(self) else 0.0
        return (f"Workload(name={self.name!r}, requests={len(self)}, span={span:.1f}s, "
                f"seed={self.seed}, vocab_size={self.vocab_size}, block_size={self.block_size})")

    # ---- columns (read-only) ----------------------------------------------------------------
    @property
    def arrivals(self) -> np.ndarray:
        return self._arrival

    @property
    def prompt_lens(self) -> np.ndarray:
        return self._prompt

    @property
    def output_lens(self) -> np.ndarray:
        return self._output

    # ---- tokens -----------------------------------------------------------------------------
    def prompt_tokens(self, spec: RequestSpec) -> np.ndarray:
        """The prompt ids (int32, length ``spec.prompt_len``); see the class docstring."""
        if spec.tokens is not None:
            return spec.tokens % self.vocab_size if self._fold else spec.tokens
        n = spec.prompt_len
        if spec.hash_ids:
            covered = min(n, len(spec.hash_ids) * self.block_size)
            head = self._maker.blocks(spec.hash_ids, covered)
            if covered == n:
                return head
            tail = self._maker.unique(tk.PROMPT, spec.rid, n - covered, start=covered)
            return np.concatenate([head, tail])
        return self._maker.unique(tk.PROMPT, spec.rid, n)

    def output_tokens(self, spec: RequestSpec) -> np.ndarray:
        """The answer ids (int32, length ``spec.output_len``) a sampler-less backend emits."""
        if spec.output_tokens is not None:
            return spec.output_tokens % self.vocab_size if self._fold else spec.output_tokens
        return self._maker.unique(tk.OUTPUT, spec.rid, spec.output_len)

    # ---- transformations (each returns a new Workload) ----------------------------------------
    def _derive(self, specs: Iterable[RequestSpec], **changes: Any) -> Workload:
        kw = dict(name=self.name, seed=self.seed, vocab_size=self.vocab_size,
                  block_size=self.block_size, filters=self.filters)
        kw.update(changes)
        return Workload(specs, **kw)

    def head(self, n: int) -> Workload:
        """The first ``n`` requests by arrival."""
        if n < 0:
            raise ValueError(f"head(n) needs n >= 0, got {n}")
        return self._derive(self._specs[:n])

    def window(self, t0: float, t1: float) -> Workload:
        """Requests arriving in ``[t0, t1)``, their arrivals shifted so that ``t0`` becomes 0."""
        if t1 < t0:
            raise ValueError(f"window needs t0 <= t1, got [{t0}, {t1})")
        lo, hi = np.searchsorted(self._arrival, [t0, t1], side="left")
        return self._derive(dataclasses.replace(s, arrival=s.arrival - t0)
                            for s in self._specs[lo:hi])

    def first_seconds(self, t: float) -> Workload:
        """Requests arriving within ``t`` seconds of the first one (re-based to start at 0)."""
        if not len(self):
            return self._derive([])
        t0 = float(self._arrival[0])
        return self.window(t0, t0 + t)

    def scale_time(self, factor: float) -> Workload:
        """Multiply every inter-arrival time by ``factor`` (>= 0); the first arrival stays put."""
        if not factor >= 0 or not np.isfinite(factor):
            raise ValueError(f"time scale factor must be finite and >= 0, got {factor}")
        if not len(self):
            return self._derive([])
        t0 = float(self._arrival[0])
        new = t0 + (self._arrival - t0) * factor
        return self._derive(dataclasses.replace(s, arrival=float(a))
                            for s, a in zip(self._specs, new))

    def mean_rate(self) -> float:
        """Requests per second: ``(n - 1) / span``; ``inf`` when all arrive at once."""
        if len(self) < 2:
            raise ValueError("a rate needs at least two requests")
        span = float(self._arrival[-1] - self._arrival[0])
        return float("inf") if span == 0 else (len(self) - 1) / span

    def with_rate(self, rate: float) -> Workload:
        """Rescale time so that the mean arrival rate is ``rate`` req/s (``inf``: all at once)."""
        if not rate > 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        current = self.mean_rate()
        if np.isinf(current):
            if np.isinf(rate):
                return self._derive(self._specs)
            raise ValueError("all requests arrive at once: a mean rate cannot be imposed")
        return self.scale_time(0.0 if np.isinf(rate) else current / rate)

    def with_vocab(self, vocab_size: int) -> Workload:
        """The same requests with token ids drawn from (or folded into) ``[0, vocab_size)``."""
        return self._derive(self._specs, vocab_size=vocab_size)

    def drop_long_prompts(self, max_prompt_tokens: int) -> Workload:
        """The requests whose prompt has at most ``max_prompt_tokens`` tokens; what was dropped is
        recorded as ``filters["max_prompt_tokens"]``."""
        if max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        keep = [s for s in self._specs if s.prompt_len <= max_prompt_tokens]
        gone = [s.rid for s in self._specs if s.prompt_len > max_prompt_tokens]
        record = DropCount(int(max_prompt_tokens), len(gone), len(keep), tuple(gone[:10]))
        return self._derive(keep, filters={**self.filters, "max_prompt_tokens": record})

    def over_long(self, max_model_len: int) -> list[int]:
        """Rids whose ``prompt_len + output_len`` exceeds ``max_model_len`` (nothing is trimmed)."""
        mask = (self._prompt + self._output) > max_model_len
        return [self._specs[i].rid for i in np.flatnonzero(mask)]

    # ---- views ------------------------------------------------------------------------------
    def to_frame(self) -> pd.DataFrame:
        """One row per request: rid, arrival, prompt_len, output_len, tenant, priority, session,
        num_hash_ids, explicit_tokens."""
        s = self._specs
        return pd.DataFrame({
            "rid": np.fromiter((x.rid for x in s), np.int64, len(s)),
            "arrival": self._arrival.copy(),
            "prompt_len": self._prompt.copy(),
            "output_len": self._output.copy(),
            "tenant": [x.tenant for x in s],
            "priority": np.fromiter((x.priority for x in s), np.int64, len(s)),
            "session": pd.array([x.session for x in s], dtype="Int64"),
            "num_hash_ids": np.fromiter((len(x.hash_ids or ()) for x in s), np.int64, len(s)),
            "explicit_tokens": np.fromiter((x.tokens is not None for x in s), bool, len(s)),
        })

    def stats(self) -> dict[str, float | int]:
        """count, span_s, rate (req/s; nan under two requests), and prompt/output mean/p50/p99."""
        n = len(self)
        out: dict[str, float | int] = {"count": n}
        span = float(self._arrival[-1] - self._arrival[0]) if n else 0.0
        out["span_s"] = span
        out["rate"] = (n - 1) / span if n > 1 and span > 0 else float("nan")
        for key, col in (("prompt", self._prompt), ("output", self._output)):
            if n:
                p50, p99 = np.percentile(col, [50, 99])
                out.update({f"{key}_mean": float(col.mean()), f"{key}_p50": float(p50),
                            f"{key}_p99": float(p99)})
            else:
                out.update({f"{key}_mean": float("nan"), f"{key}_p50": float("nan"),
                            f"{key}_p99": float("nan")})
        return out
