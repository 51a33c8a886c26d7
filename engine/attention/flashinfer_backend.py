"""FlashInfer paged attention: prefill/mixed and decode wrappers, plus CUDA-graph decode wrappers.

flashinfer is imported here only, lazily (when the backend is built).
"""

from __future__ import annotations

import numpy as np
import torch

from twinserve.engine.attention.base import AttentionInputs, AttentionSpec

_WORKSPACE_BYTES = 256 * 1024 * 1024


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32))


def _qo_indptr(qo_lens: np.ndarray) -> torch.Tensor:
    """Row offsets of the query tokens (``[0, cumsum(qo_lens)]``) as FlashInfer's int32 CPU tensor."""
    return _t(np.concatenate([[0], np.cumsum(qo_lens)]))


def _to_device(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """Host int32 array -> device, through pinned memory (asynchronous, stream-ordered)."""
    return _t(a).pin_memory().to(device, non_blocking=True)


def split_kv_workspace_bytes(tokens: int, rows: int, num_heads: int, num_kv_heads: int,
                             head_dim: int, num_sm: int) -> int:
    """Float workspace a CUDA-graph prefill plan of ``tokens`` rows over ``rows`` sequences
    needs: FlashInfer 0.6.8 always splits the KV in graph mode and keeps a partial output and
    log-sum-exp per (padded work tile, query head, tile row); the tile and grid rules follow
    its ``PrefillSplitQOKVIndptr`` (scheduler.cuh), plus 1 MiB for alignment."""
    group = num_heads // num_kv_heads
    max_qo = (tokens - rows + 1) * group
    cta = 128 if max_qo > 64 and head_dim < 256 else (64 if max_qo > 16 else 16)
    tiles = -(-tokens * group // cta) + rows - 1
    padded = max(2 * num_sm // num_kv_heads, tiles)
    return num_heads * padded * cta * (head_dim + 1) * 4 + (1 << 20)


class FlashInferAttention:
    """FlashInfer 0.6.8 over the pool's NHD ``(k, v)`` pages.

    - mixed or prefill steps: ``BatchPrefillWithPagedKVCacheWrapper`` (causal; ``prefill_backend``
      "fa2" or "fa3", FlashInfer's Hopper kernels; the token graphs below keep fa2);
    - decode-only steps: ``BatchDecodeWithPagedKVCacheWrapper`` (tensor-core variant when the
      GQA group is >= 4 or when asked);
    - CUDA graphs: one ``use_cuda_graph=True`` decode wrapper per captured batch size, all
      sharing fixed indptr/indices/last-page buffers; ``plan_graph`` is called before each
      replay (plans cannot be captured) and the captured ``run`` reads the refreshed buffers.
    - token graphs (engine/step_graph.py): one ``use_cuda_graph=True`` prefill wrapper per
      padded token count ``t``, of fixed batch ``rows[t]``; ``plan_token_graph`` pads a step to
      those rows with empty ones (`AttentionInputs.pad_rows`). They share index buffers and a
      float workspace sized for the largest plan (`split_kv_workspace_bytes`): all graphs run in
      one stream's order, so one step's plan never overwrites what a running step reads.

    Contract of ``AttentionBackend``; ``plan``/``plan_graph`` take host arrays and copy them to
    the device on the current stream, so they are ordered after any step already enqueued.
    ``fast_plan`` (default) binds `host_max.tensor_max` into FlashInfer's plan modules (their
    longest-length scans of host tensors, 1.1 ms of a 33-sequence prefill plan, become one
    reduction; process-wide); False restores the builtin.
    """

    name = "flashinfer"
    supports_cuda_graphs = True

    def __init__(self, spec: AttentionSpec, decode_tensor_cores: bool | None = None,
                 fast_plan: bool = True, prefill_backend: str = "fa2",
                 workspace: torch.Tensor | None = None) -> None:
        import flashinfer

        from twinserve.engine.attention import host_max

        self._fi = flashinfer
        # the plans' scans of host tensors by one reduction each (process-wide; host_max.py)
        (host_max.install if fast_plan else host_max.uninstall)(flashinfer)
        self.fast_plan = fast_plan
        self.spec = spec
        self.pool = spec.pool
        dev = self.pool.device
        if decode_tensor_cores is None:
            decode_tensor_cores = spec.num_heads // spec.num_kv_heads >= 4
        self.tensor_cores = decode_tensor_cores
        # another backend's float workspace may be shared when the two never run at once (a draft's)
        self.workspace = torch.zeros(_WORKSPACE_BYTES, dtype=torch.uint8, device=dev) if workspace is None else workspace
        self.prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(self.workspace, "NHD",
                                                                backend=prefill_backend)
        self.decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_tensor_cores=decode_tensor_cores)
        self._graph: dict[int, object] = {}
        self._token: dict[int, object] = {}
        self._token_rows: dict[int, int] = {}
        self._active: object | None = None
        self._active_prefill = False  # the active wrapper is a prefill one (needs an ``out``)
        self._kv = [(self.pool.k(i), self.pool.v(i)) for i in range(self.pool.geom.num_layers)]

    # ---- planning ------------------------------------------------------------------------
    def _common(self) -> dict:
        s = self.spec
        return dict(num_qo_heads=s.num_heads, num_kv_heads=s.num_kv_heads, page_size=self.pool.page_size,
                    q_data_type=s.dtype, kv_data_type=self.pool.geom.dtype)

    def plan(self, inputs: AttentionInputs) -> None:
        c = self._common()
        indptr, indices, last = _t(inputs.page_indptr), _t(inputs.page_indices), _t(inputs.last_page_len)
        if inputs.decode_only:
            self.decode.plan(indptr, indices, last, head_dim=self.spec.head_dim, **c)
            self._active, self._active_prefill = self.decode, False
        else:
            qo_indptr = _qo_indptr(inputs.qo_lens)
            self.prefill.plan(qo_indptr, indptr, indices, last, head_dim_qk=self.spec.head_dim,
                              causal=True, **c)
            self._active, self._active_prefill = self.prefill, True

    def init_graphs(self, batch_sizes: list[int]) -> None:
        """Create one CUDA-graph decode wrapper per batch size (shared index buffers)."""
        dev = self.pool.device
        max_bs = max(batch_sizes)
        self._indptr_buf = torch.zeros(max_bs + 1, dtype=torch.int32, device=dev)
        self._last_buf = torch.zeros(max_bs, dtype=torch.int32, device=dev)
        self._indices_buf = torch.zeros(max_bs * self.spec.max_pages_per_seq, dtype=torch.int32, device=dev)
        for bs in batch_sizes:
            self._graph[bs] = self._fi.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace, "NHD", use_cuda_graph=True, use_tensor_cores=self.tensor_cores,
                paged_kv_indptr_buffer=self._indptr_buf[: bs + 1],
                paged_kv_indices_buffer=self._indices_buf,
                paged_kv_last_page_len_buffer=self._last_buf[:bs])

    def plan_graph(self, bs: int, inputs: AttentionInputs) -> None:
        """Plan the decode wrapper of graph size ``bs``; ``inputs`` already padded to ``bs`` rows."""
        w = self._graph[bs]
        # FlashInfer copies host page indices into the graph's buffer with a blocking copy (a
        # stream sync: the previous step would have to end first); from pinned memory to the
        # device they go asynchronously, and the plan's device-to-device copy is ordered after
        indices = _to_device(inputs.page_indices, self.pool.device)
        w.plan(_t(inputs.page_indptr), indices, _t(inputs.last_page_len),
               head_dim=self.spec.head_dim, **self._common())
        self._active, self._active_prefill = w, False

    def init_token_graphs(self, rows: dict[int, int]) -> None:
        """One CUDA-graph prefill wrapper per padded token count ``t``, of ``rows[t]`` sequences."""
        dev = self.pool.device
        s = self.spec
        max_rows = max(rows.values())
        num_sm = torch.cuda.get_device_properties(dev).multi_processor_count
        need = max(split_kv_workspace_bytes(t, r, s.num_heads, s.num_kv_heads, s.head_dim, num_sm)
                   for t, r in rows.items())
        self.token_workspace = torch.zeros(need, dtype=torch.uint8, device=dev)
        self._tok_qo = torch.zeros(max_rows + 1, dtype=torch.int32, device=dev)
        self._tok_indptr = torch.zeros(max_rows + 1, dtype=torch.int32, device=dev)
        self._tok_last = torch.zeros(max_rows, dtype=torch.int32, device=dev)
        self._tok_indices = torch.zeros(max_rows * s.max_pages_per_seq, dtype=torch.int32, device=dev)
        for t, r in rows.items():
            self._token[t] = self._fi.BatchPrefillWithPagedKVCacheWrapper(
                self.token_workspace, "NHD", backend="fa2", use_cuda_graph=True,
                qo_indptr_buf=self._tok_qo[: r + 1], paged_kv_indptr_buf=self._tok_indptr[: r + 1],
                paged_kv_indices_buf=self._tok_indices, paged_kv_last_page_len_buf=self._tok_last[:r])
            self._token_rows[t] = r

    def plan_token_graph(self, t: int, inputs: AttentionInputs) -> None:
        """Plan the prefill wrapper of token graph ``t`` for a step of at most ``t`` tokens; the
        first plan of a wrapper (its capture) must have exactly ``t`` tokens."""
        p = inputs.pad_rows(self._token_rows[t], self.pool.scratch_page)
        qo_indptr = _qo_indptr(p.qo_lens)
        self._token[t].plan(qo_indptr, _t(p.page_indptr), _to_device(p.page_indices, self.pool.device),
                            _t(p.last_page_len), head_dim_qk=self.spec.head_dim, causal=True,
                            **self._common())
        self._active, self._active_prefill = self._token[t], True

    # ---- running -------------------------------------------------------------------------
    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                slots: torch.Tensor | None, out: torch.Tensor | None = None) -> torch.Tensor:
        if slots is not None:
            self.pool.write(layer, slots, k, v)
        # q may be a strided view (the kernels read its row and head strides); the prefill
        # wrapper would zero-fill an output of its own (one more kernel launch per layer)
        if out is None and self._active_prefill:
            out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        return self._active.run(q, self._kv[layer], out=out)  # type: ignore[union-attr]
