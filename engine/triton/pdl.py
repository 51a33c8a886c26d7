"""Programmatic dependent launch (PDL) for the engine's Triton kernels, on Hopper and newer.

A kernel launched with PDL may be scheduled while the kernel before it in the stream is still
finishing, as FlashInfer launches its kernels there; inside, it waits for its predecessor's
results (``griddepcontrol.wait``) before its first load, then lets its own successor be
scheduled (``griddepcontrol.launch_dependents``). Where PDL is off both are compiled out.
It is off by default because it does not make the engine faster (docs/side_by_side.md);
``TWINSERVE_TRITON_PDL=1`` in the environment turns it on (``bench/sbs.py --variant
'pdl:env.TWINSERVE_TRITON_PDL=1'`` measures it against the default).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


def pdl_on(t: torch.Tensor) -> bool:
    """Whether kernels reading ``t`` launch with PDL: turned on, a CUDA device of compute
    capability 9 or more, and a Triton that has the grid-dependency instructions."""
    return (os.environ.get("TWINSERVE_TRITON_PDL", "0") == "1" and t.is_cuda
            and torch.cuda.get_device_capability(t.device)[0] >= 9 and hasattr(tl.extra.cuda, "gdc_wait"))


@triton.jit
def dependent_start(PDL: tl.constexpr):
    """The first statement of a kernel launched with ``launch_pdl=PDL``: wait for the previous
    kernel's writes, then let the next kernel be scheduled."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
