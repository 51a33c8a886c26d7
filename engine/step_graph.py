"""Whole-step CUDA graphs for prefill and mixed steps: the forward, attention included, per
padded token count.

A prefill or mixed step's attention plan depends on every row's lengths, but FlashInfer's
CUDA-graph prefill wrapper takes the plan from device buffers that a host-side ``plan`` fills
before each replay, for a batch of fixed size. So each padded token count ``t``
(`core.graph_plan.padded_token_count`) gets one graph of the whole forward and one such wrapper of
``rows[t] = min(t, max_rows)`` sequences; a step is padded to ``t`` tokens (the extra tokens
write their KV to the pool's scratch page) and to ``rows[t]`` sequences (empty ones, which
add no work). One graph launch replaces the per-layer attention calls that the piecewise
graphs (engine/piecewise_graph.py) leave eager.
"""

from __future__ import annotations

import numpy as np
import torch

from twinserve.core.graph_plan import padded_token_count
from twinserve.engine.attention.base import AttentionBackend, AttentionInputs
from twinserve.engine.capture_log import CaptureLog
from twinserve.engine.cuda_graph import capture
from twinserve.engine.kv_pool import KVPool
from twinserve.engine.models.decoder import CausalLM, ForwardContext
from twinserve.engine.piecewise_graph import piece_token_counts


def capture_inputs(tokens: int, rows: int, page_size: int, scratch_page: int) -> AttentionInputs:
    """A plan of exactly ``tokens`` new tokens over ``rows`` sequences, all on the scratch
    page: the first row takes ``tokens - rows + 1``, every other row one. A CUDA-graph prefill
    wrapper sizes its kernels' grid from its first plan, so it is captured with this one."""
    qo = np.ones(rows, np.int32)
    qo[0] = tokens - rows + 1
    pages = -(-qo // page_size)
    return AttentionInputs.from_lengths(qo, qo, np.full(int(pages.sum()), scratch_page), page_size, False)


class StepGraphs:
    """``hidden = model(ids, positions, slots)`` captured per padded token count, attention in.

    Buffers: ``ids``, ``positions``, ``slots`` [cap] (int64) in; graph ``t`` reads rows
    ``[0, t)`` and leaves its hidden states [t, H] in ``out[t]``.

    Contract (shared with `PiecewiseGraphs`, see engine/token_graphs.py): ``size_for(n)`` is the
    padded size of a step of ``n`` tokens (0: run it eagerly); ``plan(t, inputs)`` plans its
    attention; ``forward(t, ids, positions, slots)`` returns the real rows' hidden states.

    Invariants: rows ``[n, t)`` of ``slots`` point at the scratch slot before every replay (a
    stale slot there would overwrite another request's KV); their ids and positions are stale
    but valid, and their outputs are never read. A step has at most ``max_rows`` sequences
    (the scheduler's running cap) and never more sequences than tokens, so it fits ``rows[t]``.
    ``capture=False`` runs the same padded forward without graphs through the backend's
    ordinary ``plan`` (the CPU test of the padding); capturing needs CUDA and a backend with
    ``init_token_graphs``/``plan_token_graph``.
    """

    def __init__(self, model: CausalLM, attn: AttentionBackend, pool: KVPool, max_tokens: int,
                 max_rows: int, capture: bool = True, stream: "torch.cuda.Stream | None" = None,
                 log: CaptureLog | None = None) -> None:
        self.model = model
        self.attn = attn
        self.pool = pool
        self.max_tokens = max_tokens
        self.sizes = piece_token_counts(max_tokens)
        if not self.sizes or max_rows < 1:
            raise ValueError(f"step graphs need max_tokens >= 1 and max_rows >= 1 "
                             f"(got {max_tokens}, {max_rows})")
        self.rows = {t: min(t, max_rows) for t in self.sizes}
        cap = max(self.sizes)
        dev = pool.device
        self.ids = torch.zeros(cap, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(cap, dtype=torch.int64, device=dev)
        self.scratch_slot = pool.scratch_page * pool.page_size
        self.slots = torch.full((cap,), self.scratch_slot, dtype=torch.int64, device=dev)
        self.out: dict[int, torch.Tensor] = {}
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.log = log or CaptureLog.descending("full", self.sizes)  # the capture order
        if capture:
            attn.init_token_graphs(self.rows)  # type: ignore[attr-defined]
            self._capture_all(stream or torch.cuda.Stream())

    def size_for(self, num_tokens: int) -> int:
        """The padded size a step of ``num_tokens`` replays (0: too large, run it eagerly)."""
        return padded_token_count(num_tokens, self.max_tokens)

    def plan(self, t: int, inputs: AttentionInputs) -> bool:
        """Plan the attention of a step padded to ``t`` tokens (before `forward`); True: the
        step is one graph replay."""
        if self.graphs:
            self.attn.plan_token_graph(t, inputs)  # type: ignore[attr-defined]
        else:
            self.attn.plan(inputs.pad_rows(self.rows[t], self.pool.scratch_page))
        return True

    def _run(self, t: int) -> torch.Tensor:
        ctx = ForwardContext(positions=self.positions[:t], slots=self.slots[:t], attn=self.attn)
        return self.model(self.ids[:t], ctx)

    @torch.inference_mode()
    def forward(self, t: int, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Hidden states [n, H] of a step of ``n = len(ids)`` tokens padded to ``t`` (planned)."""
        n = ids.shape[0]
        self.ids[:n].copy_(ids)
        self.positions[:n].copy_(positions)
        self.slots[:n].copy_(slots)
        if n < t:
            self.slots[n:t].fill_(self.scratch_slot)
        if not self.graphs:
            return self._run(t)[:n]
        self.graphs[t].replay()
        return self.out[t][:n]

    @torch.inference_mode()
    def _capture_all(self, stream: torch.cuda.Stream) -> None:
        pool_handle = torch.cuda.graph_pool_handle()
        page, scratch = self.pool.page_size, self.pool.scratch_page
        for t in self.log.order("full", self.sizes):
            with self.log.capturing("full", t):
                self.ids.zero_()
                self.positions.zero_()
                self.slots.fill_(self.scratch_slot)
                self.attn.plan_token_graph(t, capture_inputs(t, self.rows[t], page, scratch))  # type: ignore[attr-defined]
                self.graphs[t], self.out[t] = capture(lambda: self._run(t), stream, pool_handle)
        torch.cuda.synchronize()
