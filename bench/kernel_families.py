"""CUDA kernel names grouped into families, and the side-by-side table of their device time.

A profile is a list of `KernelTime` rows (name, calls, device seconds) plus the profiled span;
`family_of` names each kernel's family by the first pattern of `FAMILIES` that its name
matches (case-insensitive), so the same rules read both engines' kernels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    (``busy_s`` <= ``span_s``; the rest are idle gaps between kernels)."""

    engine: str
    kernels: list[KernelTime]
    span_s: float
    busy_s: float

    @property
    def idle_s(self) -> float:
        return max(0.0, self.span_s - self.busy_s)

    def by_family(self) -> dict[str, float]:
        out = {f: 0.0 for f in FAMILY_ORDER}
        for k in self.kernels:
            out[family_of(k.name)] += k.device_s
        return out

    def to_dict(self) -> dict:
        return {"engine": self.engine, "span_s": self.span_s, "busy_s": self.busy_s,
                "kernels": [[k.name, k.calls, k.device_s] for k in self.kernels]}

    @classmethod
    def from_dict(cls, d: dict) -> "Profile":
        return cls(d["engine"], [KernelTime(n, int(c), float(s)) for n, c, s in d["kernels"]],
                   float(d["span_s"]), float(d["busy_s"]))


def family_of(name: str) -> str:
    for fam, pat in _COMPILED:
        if pat.search(name):
            return fam
    return "other"


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def family_table(profiles: list[Profile]) -> str:
    """Markdown: device seconds per family, one column per engine, then idle gaps and the span."""
    fams = [p.by_family() for p in profiles]
    head = "| device seconds | " + " | ".join(p.engine for p in profiles) + " |"
    rows = [head, "|---" * (len(profiles) + 1) + "|"]
    for f in FAMILY_ORDER:
        rows.append(f"| {f} | " + " | ".join(f"{d[f]:.3f}" for d in fams) + " |")
    rows.append("| idle gaps between kernels | " + " | ".join(f"{p.idle_s:.3f}" for p in profiles) + " |")
    rows.append("| busy / span | " + " | ".join(f"{p.busy_s:.3f} / {p.span_s:.3f}" for p in profiles) + " |")
    return "\n".join(rows)


def top_kernels(profile: Profile, n: int = 15) -> str:
    """Markdown: the ``n`` kernels with the most device time, with family and calls."""
    rows = [f"| {profile.engine}: kernel | family | calls | device s |", "|---|---|---|---|"]
    for k in sorted(profile.kernels, key=lambda k: -k.device_s)[:n]:
        rows.append(f"| `{k.name[:90]}` | {family_of(k.name)} | {k.calls} | {k.device_s:.3f} |")
    return "\n".join(rows)
