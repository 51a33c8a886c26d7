"""The order of a step's rows, chosen by name (``EngineConfig.row_order``).

The attention kernels take their work items (a sequence's query tile over its KV, per KV head)
in row order, so the last ones to start set how long the device waits on the longest one.
``scheduled`` keeps the scheduler's order; ``longest_first`` sorts the rows by the context they
attend to, longest first, so that the work items left at the end of a call are the shortest.
Every ordering returns a `Batch` of the same rows (a permutation: tokens, pages and outputs stay
with their request), or the batch itself when it keeps the order.
"""

from __future__ import annotations

from typing import Callable

from twinserve.core.batch import Batch
from twinserve.core.registry import Registry

ROW_ORDERS: Registry[Callable[[Batch], Batch]] = Registry("row order")


def permuted(batch: Batch, order: list[int]) -> Batch:
    """``batch`` with its rows in ``order`` (a permutation of ``range(len(batch))``)."""
    if len(order) != len(batch) or sorted(order) != list(range(len(batch))):
        raise ValueError("a row order must be a permutation of the batch's rows")
    drafts = None if batch.drafts is None else [batch.drafts[i] for i in order]
    return Batch(batch.step, [batch.reqs[i] for i in order], [batch.starts[i] for i in order],
                 [batch.new_tokens[i] for i in order], [batch.emits[i] for i in order],
                 [batch.out_pos[i] for i in order], [batch.is_decode[i] for i in order],
                 batch.decode_shared_ctx, drafts)


@ROW_ORDERS.register("scheduled")
def scheduled(batch: Batch) -> Batch:
    return batch


@ROW_ORDERS.register("longest_first")
def longest_first(batch: Batch) -> Batch:
    ctx = [s + n for s, n in zip(batch.starts, batch.new_tokens)]
    order = sorted(range(len(ctx)), key=ctx.__getitem__, reverse=True)
    if all(a < b for a, b in zip(order, order[1:])):
        return batch
    return permuted(batch, order)
