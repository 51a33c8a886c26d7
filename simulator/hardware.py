"""Accelerator specs the cost models read: peak compute, memory bandwidth, link bandwidth, memory."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from twinserve.core.registry import Registry


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One accelerator's performance ceilings and memory.

    Units are SI: FLOP/s, bytes/s, bytes, seconds. ``flops`` is the dense bf16 matmul rate and
    ``hbm_bw`` the memory bandwidth a well-tuned kernel actually reaches (measured ceilings, not
    datasheet peaks), so a cost model's efficiency factors only cover what real kernels lose on top.
    ``link_bw`` is the GPU-to-GPU bandwidth per direction (NVLink) used by tensor-parallel
    all-reduces, ``link_latency_s`` the fixed cost of one collective. ``memory`` is the device memory
    the KV pool and the weights share.
    """

    name: str
    flops: float
    hbm_bw: float
    link_bw: float
    memory: float
    link_latency_s: float = 8e-6

    def with_overrides(self, **kw: Any) -> "GPUSpec":
        return replace(self, **{k: v for k, v in kw.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


HARDWARE: Registry[GPUSpec] = Registry("hardware")


@HARDWARE.register("h200")
def h200() -> GPUSpec:
    """NVIDIA H200 SXM: 141 GB HBM3e; measured ceilings ~790 TFLOP/s bf16 and ~4.3 TB/s
    (datasheet: 989 TFLOP/s dense, 4.8 TB/s); NVLink 4 at 450 GB/s per direction."""
    return GPUSpec("h200", flops=790e12, hbm_bw=4.3e12, link_bw=450e9, memory=141e9)


@HARDWARE.register("h100")
def h100() -> GPUSpec:
    """NVIDIA H100 SXM: 80 GB HBM3; measured ceilings ~700 TFLOP/s bf16 and ~3.0 TB/s
    (datasheet: 989 TFLOP/s dense, 3.35 TB/s); NVLink 4 at 450 GB/s per direction."""
    return GPUSpec("h100", flops=700e12, hbm_bw=3.0e12, link_bw=450e9, memory=80e9)


@HARDWARE.register("cpu")
def cpu() -> GPUSpec:
    """A laptop-class CPU running the engine's torch backend (rough: ~1 TFLOP/s, ~50 GB/s, 16 GB),
    so that simulated runs can be compared with the CPU engine used in CI."""
    return GPUSpec("cpu", flops=1e12, hbm_bw=50e9, link_bw=10e9, memory=16e9, link_latency_s=20e-6)


def get_hardware(name: str, **overrides: Any) -> GPUSpec:
    """The preset ``name`` with any non-None field overridden (e.g. ``hbm_bw=3.9e12``)."""
    return HARDWARE.create(name).with_overrides(**overrides)
