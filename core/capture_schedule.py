"""The CUDA-graph capture schedule of a `GraphPlan`, and the comparison of what ranks captured.

Every rank of a tensor-parallel group captures its graphs in the order `capture_schedule` lists
them (the graphs hold collectives, so two ranks capturing different graphs, or the same graphs in
another order, would wait on each other forever). After capture each rank reports its
`CaptureRecord` list to rank 0, and `first_difference` names the first rank and position where
a report differs from rank 0's. Pure Python (the plan's sizes come from `core.graph_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from twinserve.core.graph_plan import HYBRID_FULL_MAX_TOKENS, GraphPlan, padded_batch_size, padded_token_count
from twinserve.core.registry import Registry


def decode_graph_sizes(max_graph_bs: int) -> list[int]:
    """The decode batch sizes ``padded_batch_size`` pads to, up to ``max_graph_bs``, ascending."""
    return sorted({padded_batch_size(n, max_graph_bs) for n in range(1, max_graph_bs + 1)})


def token_graph_sizes(max_tokens: int) -> list[int]:
    """The token counts ``padded_token_count`` pads to, up to ``max_tokens``, ascending."""
    return sorted({padded_token_count(n, max_tokens) for n in range(1, max_tokens + 1)} - {0})


@dataclass(frozen=True, slots=True)
class CaptureItem:
    """One graph set's capture at one size: ``kind`` is "decode" (`CudaGraphRunner`), "full"
    (whole-step token graph) or "pieces" (the dense pieces of a piecewise token graph)."""

    kind: str
    size: int


@dataclass(frozen=True, slots=True)
class CaptureRecord:
    """What a rank captured for one `CaptureItem`, with the collectives issued while capturing it
    (warm-up runs included)."""

    kind: str
    size: int
    all_reduces: int = 0
    all_gathers: int = 0

    def describe(self) -> str:
        """"decode 64", with the collective counts when any were issued."""
        if not (self.all_reduces or self.all_gathers):
            return f"{self.kind} {self.size}"
        return f"{self.kind} {self.size} ({self.all_reduces} all-reduces, {self.all_gathers} all-gathers)"

    @classmethod
    def planned(cls, item: CaptureItem) -> "CaptureRecord":
        """A schedule's item as a record (no collectives counted)."""
        return cls(item.kind, item.size)


# Token-graph mode -> the graph sets it captures, in order, as (kind, largest token count), given
# the plan's ``piecewise_max_tokens`` (the engine's `TOKEN_GRAPHS` factories build them in this order).
TOKEN_SETS: Registry[list[tuple[str, int]]] = Registry("token graph mode")


@TOKEN_SETS.register("full")
def _full_sets(max_tokens: int) -> list[tuple[str, int]]:
    return [("full", max_tokens)]


@TOKEN_SETS.register("piecewise")
def _piece_sets(max_tokens: int) -> list[tuple[str, int]]:
    return [("pieces", max_tokens)]


@TOKEN_SETS.register("hybrid")
def _hybrid_sets(max_tokens: int) -> list[tuple[str, int]]:
    return [("full", min(max_tokens, HYBRID_FULL_MAX_TOKENS)), ("pieces", max_tokens)]


def capture_schedule(plan: GraphPlan) -> list[CaptureItem]:
    """Every graph an engine with ``plan`` captures, in capture order: the decode graphs from the
    largest batch down, then the token-graph sets of ``plan.token_graph_mode`` (none when
    ``piecewise_max_tokens`` is 0), each from its largest size down."""
    items = [CaptureItem("decode", bs) for bs in reversed(decode_graph_sizes(plan.max_graph_bs))]
    if plan.piecewise_max_tokens > 0:
        for kind, cap in TOKEN_SETS.create(plan.token_graph_mode, max_tokens=plan.piecewise_max_tokens):
            items += [CaptureItem(kind, t) for t in reversed(token_graph_sizes(cap))]
    return items


def report_of(records: Sequence[CaptureRecord]) -> list[list]:
    """A JSON-able capture report."""
    return [[r.kind, r.size, r.all_reduces, r.all_gathers] for r in records]


def records_of(report: Sequence[Sequence]) -> list[CaptureRecord]:
    """The inverse of `report_of`."""
    return [CaptureRecord(str(k), int(s), int(a), int(g)) for k, s, a, g in report]


def first_difference(reports: Mapping[int, Sequence[CaptureRecord]],
                     what: str = "graph capture") -> tuple[int, str] | None:
    """None when every rank's records equal rank 0's, else ``(rank, sentence)`` for the lowest
    rank that differs, the sentence naming it and the first position where it does (a missing
    record reads "nothing")."""
    ref = list(reports[0])
    for rank in sorted(r for r in reports if r != 0):
        got = list(reports[rank])
        for i in range(max(len(ref), len(got))):
            a = ref[i] if i < len(ref) else None
            b = got[i] if i < len(got) else None
            if a != b:
                da = a.describe() if a is not None else "nothing"
                db = b.describe() if b is not None else "nothing"
                return rank, (f"tensor-parallel rank {rank}'s {what} differs from rank 0's at position {i} "
                              f"(of {len(ref)} on rank 0, {len(got)} on rank {rank}): rank 0 has {da}, "
                              f"rank {rank} has {db}")
    return None
