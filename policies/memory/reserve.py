"""`reserve`: take pages for the whole prompt + max_tokens at admission; never preempt."""

from __future__ import annotations

from twinserve.core.request import Req
from twinserve.policies.memory.base import MemoryPolicy, pages_for
from twinserve.policies.registries import MEMORY


@MEMORY.register("reserve")
class ReserveMemory(MemoryPolicy):
    """Admits a request only if its worst-case KV fits, so a running request never runs out."""

    name = "reserve"
    preempts = False

    def admission_pages(self, req: Req, start: int, chunk: int, page_size: int) -> int:
        return pages_for(req.prompt_len + req.params.max_tokens, page_size)

    def can_admit(self, new_pages: int, available: int, total: int) -> bool:
        return new_pages <= available
