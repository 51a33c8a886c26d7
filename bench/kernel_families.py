"""CUDA kernel names grouped into families, and the side-by-side table of their device time.

A profile is a list of `KernelTime` rows (name, calls, device seconds) plus the profiled span;
`family_of` names each kernel's family by the first pattern of `FAMILIES` that its name
matches (case-insensitive), so the same rules read both engines' kernels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# (family, pattern), first match wins; order matters (an attention kernel named "...prefill..."
# must not fall to "copies" through "kv", a fused norm+add to "norm", ...).
FAMILIES: tuple[tuple[str, str], ...] = (
    ("attention (decode kernel)", r"batchdecode|decode.*kernel|decodewithpagedkv|batchdecodewith"),
    ("attention (prefill kernel)", r"batchprefill|prefill|mergestate|merge_state|variablelengthmerge"),
    ("gemm", r"nvjet|gemm|cutlass|xmma|cublas|splitk|sm90_|sm80_|ampere_|wgmma"),
    ("sampling", r"sampl|topk|top_k|topp|top_p|argmax|softmax|multinomial|exponential|sort|cub::|"
                 r"radix|renorm|gumbel|distribution"),
    ("norm", r"norm"),
    ("rope", r"rope|rotary|pos_enc"),
    ("activation", r"silu|gelu|act_and_mul|swiglu|activation"),
    ("copies", r"memcpy|memset|copy|cat|index|gather|scatter|store|fill|elementwise|vectorized|"
               r"unrolled|reduce|arange"),
)
_COMPILED = tuple((f, re.compile(p, re.IGNORECASE)) for f, p in FAMILIES)
FAMILY_ORDER = ("gemm", "attention (prefill kernel)", "attention (decode kernel)", "norm", "rope", "activation",
                "sampling", "copies", "other")
# idle gaps by length: launch latency between kernels queued back to back (a graph replay's),
# short stalls, and the host's (a step launched after the device ran dry)
GAP_BUCKETS: tuple[tuple[str, float], ...] = (("under 5 us", 5e-6), ("5-50 us", 50e-6), ("over 50 us", float("inf")))


@dataclass(frozen=True)
class KernelTime:
    """One kernel name's totals over a profiled run."""

    name: str
    calls: int
    device_s: float


@dataclass(frozen=True)
class Profile:
    """One engine's profiled run: its kernels, the span from the first kernel's start to the
    last one's end (``span_s``), and the time the device ran at least one kernel
    (``busy_s`` <= ``span_s``; the rest are idle gaps between kernels), and those gaps' seconds
    and counts by length (``gaps``: bucket of `GAP_BUCKETS` -> ``[seconds, count]``; empty when
    not measured)."""

    engine: str
    kernels: list[KernelTime]
    span_s: float
    busy_s: float
    gaps: dict[str, list[float]] = field(default_factory=dict)

    @property
    def idle_s(self) -> float:
        return max(0.0, self.span_s - self.busy_s)

    def by_family(self) -> dict[str, float]:
        out = {f: 0.0 for f in FAMILY_ORDER}
        for k in self.kernels:
            out[family_of(k.name)] += k.device_s
        return out

    def to_dict(self) -> dict:
        return {"engine": self.engine, "span_s": self.span_s, "busy_s": self.busy_s, "gaps": self.gaps,
                "kernels": [[k.name, k.calls, k.device_s] for k in self.kernels]}

    @classmethod
    def from_dict(cls, d: dict) -> "Profile":
        return cls(d["engine"], [KernelTime(n, int(c), float(s)) for n, c, s in d["kernels"]],
                   float(d["span_s"]), float(d["busy_s"]), dict(d.get("gaps", {})))


def family_of(name: str) -> str:
    for fam, pat in _COMPILED:
        if pat.search(name):
            return fam
    return "other"


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals."""
    return sum(b - a for a, b in _union(intervals))


def gap_buckets(intervals: list[tuple[float, float]]) -> dict[str, list[float]]:
    """The idle gaps between the union's pieces of ``(start, end)`` intervals, by `GAP_BUCKETS`
    (a gap goes to the first bucket whose bound exceeds it): ``{bucket: [seconds, count]}``."""
    out = {name: [0.0, 0] for name, _ in GAP_BUCKETS}
    pieces = _union(intervals)
    for (_, end), (start, _) in zip(pieces, pieces[1:]):
        gap = start - end
        name = next(n for n, bound in GAP_BUCKETS if gap < bound)
        out[name][0] += gap
        out[name][1] += 1
    return out


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Disjoint, sorted pieces covering the same time as ``intervals``."""
    pieces: list[list[float]] = []
    for a, b in sorted(intervals):
        if pieces and a <= pieces[-1][1]:
            pieces[-1][1] = max(pieces[-1][1], b)
        else:
            pieces.append([a, b])
    return [(a, b) for a, b in pieces]


def family_table(profiles: list[Profile]) -> str:
    """Markdown: device seconds per family, one column per engine, then idle gaps and the span."""
    fams = [p.by_family() for p in profiles]
    head = "| device seconds | " + " | ".join(p.engine for p in profiles) + " |"
    rows = [head, "|---" * (len(profiles) + 1) + "|"]
    for f in FAMILY_ORDER:
        rows.append(f"| {f} | " + " | ".join(f"{d[f]:.3f}" for d in fams) + " |")
    rows.append("| idle gaps between kernels | " + " | ".join(f"{p.idle_s:.3f}" for p in profiles) + " |")
    if any(p.gaps for p in profiles):
        for name, _ in GAP_BUCKETS:
            cells = [f"{p.gaps[name][0]:.3f} ({int(p.gaps[name][1]):,})" if name in p.gaps else "" for p in profiles]
            rows.append(f"| gaps {name} (count) | " + " | ".join(cells) + " |")
    rows.append("| busy / span | " + " | ".join(f"{p.busy_s:.3f} / {p.span_s:.3f}" for p in profiles) + " |")
    return "\n".join(rows)


def top_kernels(profile: Profile, n: int = 15) -> str:
    """Markdown: the ``n`` kernels with the most device time, with family and calls."""
    rows = [f"| {profile.engine}: kernel | family | calls | device s |", "|---|---|---|---|"]
    for k in sorted(profile.kernels, key=lambda k: -k.device_s)[:n]:
        rows.append(f"| `{k.name[:90]}` | {family_of(k.name)} | {k.calls} | {k.device_s:.3f} |")
    return "\n".join(rows)
