"""Piecewise CUDA graphs: the dense layers of eager steps replayed from graphs, attention eager.

A prefill or mixed step cannot be one graph (its attention plan depends on every row's lengths),
but everything between two attention calls depends only on the step's token count. So the
forward is cut at the attention calls into ``num_layers + 1`` pieces, each captured once per
padded token count (`core.graph_plan.padded_token_count`); a step replays piece 0, then for every
layer runs the attention eagerly and replays the next piece. That replaces about ten kernel
launches per layer (and their Python) with one graph launch.
"""

from __future__ import annotations

import torch

from twinserve.core.capture_schedule import token_graph_sizes
from twinserve.core.graph_plan import padded_token_count
from twinserve.engine.attention.base import AttentionBackend, AttentionInputs
from twinserve.engine.capture_log import CaptureLog
from twinserve.engine.models.decoder import CausalLM


def piece_token_counts(max_tokens: int) -> list[int]:
    """The padded token counts `padded_token_count` yields for 1..``max_tokens`` tokens."""
    return token_graph_sizes(max_tokens)


class PiecewiseGraphs:
    """The model's forward as ``num_layers + 1`` pieces over fixed buffers, captured per size.

    Buffers (rows ``[0, T)`` are a step padded to ``T`` tokens): ``ids``/``positions`` [T] in,
    ``residual`` [T, H], ``qkv`` [T, q+k+v] (layer i's fused projection, normed and rotated),
    ``o`` [T, q] (layer i's attention output) and ``hidden`` [T, H] (the final norm's output).

    - piece 0: embedding -> residual; layer 0's ``pre`` -> qkv;
    - piece i (1..L-1): layer i-1's ``post`` on o, layer i's ``pre`` -> qkv;
    - piece L: layer L-1's ``post``, the final norm -> hidden.

    Invariant: a piece reads only the buffers (and weights) and leaves its results in them, so
    a replay of piece i followed by the eager attention of layer i and piece i+1 computes what
    ``model.forward`` computes on the step's real rows. Padding rows hold stale ids and positions
    of earlier steps (valid values); their outputs are never read. The attention and the KV
    write see the real rows only. ``capture=False`` runs the same pieces without graphs (the
    CPU test of this decomposition); capturing needs CUDA.
    """

    def __init__(self, model: CausalLM, attn: AttentionBackend, max_tokens: int, capture: bool = True,
                 stream: "torch.cuda.Stream | None" = None, log: CaptureLog | None = None) -> None:
        self.model = model
        self.attn = attn
        self.sizes = piece_token_counts(max_tokens)
        self.max_tokens = max_tokens
        if not self.sizes:
            raise ValueError(f"piecewise graphs need max_tokens >= 1 (got {max_tokens})")
        cap = max(self.sizes)
        dec = model.model
        a0 = dec.layers[0].self_attn
        w = next(model.parameters())
        dev, dt = w.device, w.dtype
        hidden = model.config.hidden_size
        self.num_layers = len(dec.layers)
        self.ids = torch.zeros(cap, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(cap, dtype=torch.int64, device=dev)
        self.residual = torch.zeros(cap, hidden, dtype=dt, device=dev)
        self.qkv = torch.zeros(cap, a0.q_local + 2 * a0.kv_local, dtype=dt, device=dev)
        self.o = torch.zeros(cap, a0.q_local, dtype=dt, device=dev)
        self.hidden = torch.zeros(cap, hidden, dtype=dt, device=dev)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.log = log or CaptureLog.descending("pieces", self.sizes)  # the capture order
        if capture:
            self._capture_all(stream or torch.cuda.Stream())

    def size_for(self, num_tokens: int) -> int:
        """The padded size a step of ``num_tokens`` replays (0: too large, run it eagerly)."""
        return padded_token_count(num_tokens, self.max_tokens)

    def plan(self, t: int, inputs: AttentionInputs) -> bool:
        """Plan a step's attention: it runs eagerly on the real rows, so as for any eager step
        (False: not one graph replay)."""
        self.attn.plan(inputs)
        return False

    # ---- the pieces ----------------------------------------------------------------------
    def _keep_residual(self, r: torch.Tensor, t: int) -> None:
        if r.data_ptr() != self.residual.data_ptr():  # kernels that do not add in place
            self.residual[:t].copy_(r)

    def _piece(self, i: int, t: int) -> None:
        dec = self.model.model
        res, pos = self.residual[:t], self.positions[:t]
        if i == 0:
            res.copy_(dec.embed_tokens(self.ids[:t]))
            _, r = dec.layers[0].pre(res, None, pos, qkv_out=self.qkv[:t])
        else:
            h, r = dec.layers[i - 1].post(self.o[:t], res)
            if i == self.num_layers:
                out, _ = dec.norm(h, r)
                self.hidden[:t].copy_(out)
                return
            _, r = dec.layers[i].pre(h, r, pos, qkv_out=self.qkv[:t])
        self._keep_residual(r, t)

    def _attention(self, i: int, n: int, slots: torch.Tensor) -> None:
        layer = self.model.model.layers[i].self_attn
        q, k, v = layer.heads(self.qkv[:n])
        self.attn.forward(i, q, k, v, slots, out=self.o[:n].view(q.shape))

    # ---- running -------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, t: int, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Hidden states [n, H] of a step of ``n = len(ids)`` tokens padded to ``t`` (a captured
        size, or any size >= n when running without graphs); the attention is planned already."""
        n = ids.shape[0]
        self.ids[:n].copy_(ids)
        self.positions[:n].copy_(positions)
        run = self._replay if self.graphs else self._piece
        run(0, t)
        for i in range(self.num_layers):
            self._attention(i, n, slots)
            run(i + 1, t)
        return self.hidden[:n]

    def _replay(self, i: int, t: int) -> None:
        self.graphs[(t, i)].replay()

    @torch.inference_mode()
    def _capture_all(self, stream: torch.cuda.Stream) -> None:
        pool = torch.cuda.graph_pool_handle()
        stream.wait_stream(torch.cuda.current_stream())
        for t in self.log.order("pieces", self.sizes):
            with self.log.capturing("pieces", t):
                for i in range(self.num_layers + 1):
                    with torch.cuda.stream(stream):
                        self._piece(i, t)  # warm-up: lazy kernel setup and cuBLAS workspaces
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, pool=pool, stream=stream):
                        self._piece(i, t)
                    self.graphs[(t, i)] = g
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
