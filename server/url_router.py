"""`UrlRouter`: the choice of server, among ``server.replica_urls``, for each request (the bench
client's and the URL proxy's), with the routers of `twinserve.policies.routing`, over views built
from what was sent to each server, what came back, and its ``/metrics``; and which URLs are out
of rotation, with when each is probed next."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from twinserve.core.config import scheduler_default
from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.policies import ROUTING
from twinserve.server.probe_backoff import PROBE_FIRST_S, PROBE_MAX_S, ProbeBackoff
from twinserve.server.routed_prefixes import RoutedPrefixes

URL_PAGE_SIZE = scheduler_default("page_size")  # the prefix index's granularity (the servers' is not known here)
URL_INDEX_PAGES = 1 << 16  # pages each server's prefix index keeps


class SentReplica:
    """A `ReplicaView` of a server behind a URL, as the client sees it.

    ``num_running``: requests sent and not yet ended; ``outstanding_tokens``: for those,
    ``prompt + max_tokens`` minus the tokens streamed back so far; ``match_len``: a
    `RoutedPrefixes` index of the prompts sent there; ``num_waiting`` and ``kv_usage``: the
    server's gauges as last read from its ``/metrics`` (`scraped`; 0 until read).
    Invariant: ``in_flight`` and ``tokens`` return to 0 once every request sent has ended
    (`UrlRouter.on_end` with its unreceived tokens).
    """

    def __init__(self, page_size: int, capacity_pages: int) -> None:
        self.prefixes = RoutedPrefixes(page_size, capacity_pages)
        self.in_flight = 0
        self.tokens = 0
        self.scraped: dict[str, float] = {}

    @property
    def num_waiting(self) -> int:
        return int(self.scraped.get("waiting", 0))

    @property
    def num_running(self) -> int:
        return self.in_flight

    @property
    def outstanding_tokens(self) -> int:
        return self.tokens

    @property
    def kv_usage(self) -> float:
        return float(self.scraped.get("kv_usage", 0.0))

    def match_len(self, tokens: np.ndarray) -> int:
        return self.prefixes.match_len(tokens)


class UrlRouter:
    """Routes requests over the servers at ``urls`` with router ``name`` (``kwargs``).

    Invariants: a URL marked `down` is not chosen until it is marked `up`; ``choose`` returns
    None when every live URL is down or in ``exclude``; the router sees only the candidate URLs,
    in index order. Each ``choose`` that returns a URL is matched by one ``on_end`` for it.
    A URL marked down with a time (``now``) is due for a health probe (`due`) after a back-off
    of ``probe_first_s`` that doubles with each `probe_failed`, up to ``probe_max_s``; one marked
    down without a time is never probed.
    """

    def __init__(self, urls: Sequence[str], name: str = "round_robin", kwargs: Mapping[str, Any] | None = None,
                 page_size: int = URL_PAGE_SIZE, capacity_pages: int = URL_INDEX_PAGES,
                 probe_first_s: float = PROBE_FIRST_S, probe_max_s: float = PROBE_MAX_S) -> None:
        if not urls:
            raise ValueError("UrlRouter needs at least one URL")
        self.urls = list(urls)
        self.router = ROUTING.create(name, **dict(kwargs or {}))
        self._index = (page_size, capacity_pages)
        self.views = [SentReplica(page_size, capacity_pages) for _ in self.urls]
        self.alive = [True] * len(self.urls)
        self.why_down: dict[int, str] = {}
        self.probes = [ProbeBackoff(probe_first_s, probe_max_s) for _ in self.urls]
        self.returns = [0] * len(self.urls)  # times each URL came back into rotation

    def choose(self, rid: int, prompt: np.ndarray, max_tokens: int, now: float,
               exclude: frozenset[int] = frozenset()) -> int | None:
        """The URL index for this request (recorded as sent there), or None if none is left."""
        cand = [i for i, a in enumerate(self.alive) if a and i not in exclude]
        if not cand:
            return None
        req = Req(rid, prompt, SamplingParams(max_tokens=max_tokens), arrival=now)
        k = cand[self.router.choose(req, [self.views[i] for i in cand], now)] if len(cand) > 1 else cand[0]
        v = self.views[k]
        v.in_flight += 1
        v.tokens += len(prompt) + max_tokens
        v.prefixes.add(prompt)
        return k

    def on_tokens(self, k: int, n: int = 1) -> None:
        """``n`` output tokens of a request on URL ``k`` came back."""
        self.views[k].tokens -= n

    def on_end(self, k: int, unreceived: int) -> None:
        """A request on URL ``k`` ended with ``unreceived`` of its counted tokens never streamed."""
        v = self.views[k]
        v.in_flight -= 1
        v.tokens -= unreceived

    def on_scraped(self, k: int, gauges: Mapping[str, float]) -> None:
        """URL ``k``'s ``/metrics`` gauges (`scraped_gauges`) as just read."""
        self.views[k].scraped = dict(gauges)

    def down(self, k: int, why: str, now: float | None = None) -> None:
        """Take URL ``k`` out of rotation; with ``now``, probe it from ``now + probe_first_s``."""
        if not self.alive[k]:
            return
        self.alive[k] = False
        self.why_down[k] = why
        if now is not None:
            self.probes[k].start(now)

    def due(self, now: float) -> list[int]:
        """The down URLs whose next health probe is due."""
        return [k for k, a in enumerate(self.alive) if not a and self.probes[k].due(now)]

    def probe_failed(self, k: int, now: float, why: str | None = None) -> None:
        """URL ``k`` did not answer its probe: probe again after twice the wait."""
        self.probes[k].failed(now)
        if why:
            self.why_down[k] = why

    def up(self, k: int) -> None:
        """URL ``k`` answered its probe: back in rotation, with an empty prefix index (a server
        that came back has lost its cache) and no gauges until its ``/metrics`` is read."""
        if self.alive[k]:
            return
        self.alive[k] = True
        self.why_down.pop(k, None)
        self.probes[k].reset()
        self.returns[k] += 1
        self.views[k].prefixes = RoutedPrefixes(*self._index)
        self.views[k].scraped = {}

    def none_left(self) -> str:
        """The error of a request no URL could take: every URL and why it is out."""
        parts = [f"{u} ({self.why_down.get(i, 'refused the request')})" for i, u in enumerate(self.urls)]
        return "no server left to send the request to: " + "; ".join(parts)
