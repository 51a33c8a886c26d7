"""CUDA graphs of the decode forward, one per padded batch size."""

from __future__ import annotations

from typing import Callable, TypeVar

import numpy as np
import torch

from twinserve.core.capture_schedule import decode_graph_sizes
from twinserve.engine.attention.base import AttentionInputs
from twinserve.engine.capture_log import CaptureLog
from twinserve.engine.kv_pool import KVPool
from twinserve.engine.models.decoder import CausalLM, ForwardContext


T = TypeVar("T")


def capture(run: Callable[[], T], stream: "torch.cuda.Stream", pool_handle: object,
            warmups: int = 1) -> tuple["torch.cuda.CUDAGraph", T]:
    """Run ``run`` ``warmups`` times on ``stream`` (lazy kernel setup, cuBLAS workspaces), then
    capture one call into a CUDA graph in ``pool_handle``'s memory; returns the graph and the
    captured call's output (the tensors a replay rewrites)."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmups):
            run()
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool_handle, stream=stream):
        out = run()
    return g, out


def decode_capture_inputs(bs: int, scratch_page: int) -> AttentionInputs:
    """Decode inputs of ``bs`` rows that each attend to one slot of ``scratch_page``: what a
    decode graph is captured with."""
    one = np.ones(bs, np.int32)
    return AttentionInputs(qo_lens=one, kv_lens=one, page_indptr=np.arange(bs + 1, dtype=np.int32),
                           page_indices=np.full(bs, scratch_page, np.int32), last_page_len=one, decode_only=True)


def graph_batch_sizes(max_graph_bs: int) -> list[int]:
    """The sizes ``padded_batch_size`` pads to, up to ``max_graph_bs`` (1, 2, 4, 8, 16, ...)."""
    return decode_graph_sizes(max_graph_bs)


class CudaGraphRunner:
    """Captures ``logits = lm_head(model(ids, positions, slots))`` for each decode batch size.

    Invariant: graph ``bs`` reads its inputs from ``static[0:bs]`` (ids), ``static[bs:2bs]``
    (positions) and ``static[2bs:3bs]`` (KV slots), and writes ``logits[bs]``; before a replay the
    caller copies a step's packed ``[ids | positions | slots]`` (padded to ``bs``) into
    ``static[:3bs]`` and plans the attention backend's graph wrapper for ``bs``.
    """

    def __init__(self, model: CausalLM, attn, pool: KVPool, max_graph_bs: int,
                 stream: "torch.cuda.Stream | None" = None, log: CaptureLog | None = None) -> None:
        self.model = model
        self.attn = attn
        self.pool = pool
        self.sizes = graph_batch_sizes(max_graph_bs)
        self.max_bs = max(self.sizes)
        dev = pool.device
        self.static = torch.zeros(3 * self.max_bs, dtype=torch.int64, device=dev)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        self.stream = stream or torch.cuda.Stream()  # the capture stream (shared: see ModelRunner)
        self.log = log or CaptureLog.descending("decode", self.sizes)  # the capture order
        attn.init_graphs(self.sizes)
        self._capture_all()

    def _run(self, bs: int) -> torch.Tensor:
        s = self.static
        ctx = ForwardContext(positions=s[bs:2 * bs], slots=s[2 * bs:3 * bs], attn=self.attn)
        return self.model.compute_logits(self.model(s[:bs], ctx))

    @torch.inference_mode()
    def _capture_all(self) -> None:
        pool_handle = torch.cuda.graph_pool_handle()
        for bs in self.log.order("decode", self.sizes):
            self._capture(bs, pool_handle)
        torch.cuda.synchronize()

    def _capture(self, bs: int, pool_handle) -> None:
        s, stream = self.static, self.stream
        with self.log.capturing("decode", bs):
            s.zero_()
            s[2 * bs:3 * bs] = self.pool.scratch_page * self.pool.page_size
            self.attn.plan_graph(bs, decode_capture_inputs(bs, self.pool.scratch_page))
            self.graphs[bs], self.logits[bs] = capture(lambda: self._run(bs), stream, pool_handle, warmups=2)

    def load(self, bs: int, dev_packed: torch.Tensor, inputs: AttentionInputs) -> None:
        """Copy the padded step inputs into the static buffer and plan graph ``bs``'s attention."""
        self.static[: 3 * bs].copy_(dev_packed[: 3 * bs])
        self.attn.plan_graph(bs, inputs)

    def replay(self, bs: int) -> torch.Tensor:
        """Replay graph ``bs`` (after ``load``); returns its [bs, vocab] logits buffer."""
        self.graphs[bs].replay()
        return self.logits[bs]
