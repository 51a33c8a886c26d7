"""`on_demand`: allocate pages as tokens arrive; admit above a watermark; preempt by recompute."""

from __future__ import annotations

from twinserve.core.request import Req
from twinserve.policies.memory.base import MemoryPolicy, pages_for
from twinserve.policies.registries import MEMORY


@MEMORY.register("on_demand")
class OnDemandMemory(MemoryPolicy):
    """Admits when, after the pages of the whole prompt, ``watermark`` × total pages stay available.

    Pages for the entire prompt (or, after a preemption, prompt + outputs) are taken at admission
    even when it is prefilled in chunks, so an admitted prefill always completes and only decodes
    grow page by page; this rules out two half-prefilled requests preempting each other forever.
    The watermark leaves room for running decodes to grow, which keeps preemptions rare.
    """

    name = "on_demand"
    preempts = True

    def __init__(self, watermark: float = 0.01) -> None:
        if not 0.0 <= watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1), got {watermark}")
        self.watermark = watermark

    def admission_pages(self, req: Req, start: int, chunk: int, page_size: int) -> int:
        return pages_for(req.num_tokens, page_size)

    def can_admit(self, new_pages: int, available: int, total: int) -> bool:
        return available - new_pages >= self.watermark * total
