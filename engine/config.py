"""`EngineConfig`: everything needed to build an `Engine` (plain data, Hydra-friendly)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from twinserve.core.config import SchedulerConfig, scheduler_default
from twinserve.core.errors import UnknownNameError, bad_value
from twinserve.core.graph_plan import DEFAULT_PLAN, GraphPlan
from twinserve.core.kv_budget import KvBudget
from twinserve.core.run_config import from_cfg

DEVICE_PATTERN = r"auto|cpu|cuda(:\d+)?"


@dataclass
class EngineConfig:
    """Knobs of one engine instance.

    - ``model``: a directory with config.json (+ safetensors unless ``load_format="dummy"``).
    - ``device``: "auto" (cuda if available), "cpu" or "cuda[:i]"; ``dtype``: "auto" (the
      checkpoint's dtype on GPU, float32 on CPU), "bfloat16", "float16" or "float32".
    - KV pool: ``page_size`` tokens per page; the number of pages is ``num_pages`` if given, else
      on GPU (free memory after weights − activation reserve) × ``mem_fraction``, on CPU
      ``cpu_kv_tokens / page_size``.
    - ``scheduler``: SchedulerConfig fields (a mapping or a SchedulerConfig); page_size and
      num_pages are set by the engine, max_model_len defaults to the model's.
      ``scheduling``/``memory``/``cache`` are policy names (+ ``*_kwargs``).
    - ``cuda_graphs``: decode batches up to ``max_graph_bs`` replay captured graphs (CUDA only),
      and every other step of up to ``piecewise_max_tokens`` tokens (0: none) replays a graph
      captured for its padded token count: ``token_graph_mode="full"`` the whole forward with
      FlashInfer's CUDA-graph prefill attention (engine/step_graph.py), ``"piecewise"`` the
      dense layers with the attention eager (engine/piecewise_graph.py), ``"hybrid"`` (the
      default) both, full for steps of at most 32 sequences and 2,048 tokens
      (engine/token_graphs.py; 2,048 is this class's default; a run config takes the model
      config's ``piecewise_max_tokens``, 8,192 for qwen3-0.6b, docs/engine.md);
      ``hybrid_decode_heavy``: ``hybrid`` also replays whole the steps of at most 8 new tokens
      per sequence padded to at most ``max_running`` tokens (`core.graph_plan.decode_heavy_whole`).
      ``token_graph_rows``: the whole-step token graphs hold ``max(max_running,
      token_graph_rows)`` sequences (0: ``max_running``), so decode-heavy steps of up to that
      many tokens replay whole with 16-row attention tiles (`GraphPlan.graph_rows`).
      These five make the engine's `GraphPlan` (`graph_plan`), whose defaults they take.
    - ``overlap``: the host schedules step k+1 before step k's tokens are known; None = on for
      CUDA, off on CPU (True on CPU exercises the same placeholder path, for tests).
    - ``attention_backend``: "auto" (flashinfer on CUDA, torch on CPU), "torch", "flashinfer";
      ``kernels``: "auto" (same rule; "flashinfer_triton" when ``triton_kernels`` is on),
      "torch", "flashinfer", "flashinfer_triton" (FlashInfer's, with q/k RoPE, Qwen3's q/k norms
      and the KV store as one Triton launch) for norm/RoPE/SiLU.
    - ``decode_tensor_cores``: FlashInfer decode on tensor cores; None = when the GQA group >= 4.
    - ``fast_plan``: FlashInfer's plans find the longest lengths by one tensor reduction instead
      of a Python scan per element (`engine.attention.host_max`; same plans, less host time).
    - ``spec``: speculative decoding, a `core.spec.SpecConfig` or a mapping of its fields
      (``method``: "none" or "ngram", prompt lookup; ``num_tokens``: k). Greedy requests verify
      up to k proposed tokens per step in one forward; sampled ones decode plainly. It runs
      without overlap scheduling (``overlap=None`` turns overlap off; ``True`` is refused) and
      at ``tp_size`` 1.
    - ``prefill_backend``: FlashInfer's kernels for eager prefill and mixed steps, "fa2" or
      "fa3" (Hopper only).
    - ``triton_kernels``: the KV store, temperature-only sampling and (``kernels="auto"``) q/k
      RoPE with Qwen3's q/k norms and the KV store in one launch as Triton kernels
      (`engine.triton`); None = on for CUDA when triton imports, False = torch ops.
    - ``seed``: dummy weights and the sampler's unseeded stream; ``checked``: the page allocator
      verifies every free (tests).
    - ``tp_size``: tensor-parallel degree: rank 0 runs in this process, ranks 1..N-1 in child
      processes (cuda:i+r for ``device="cuda:i"``; all on the CPU with gloo for ``device="cpu"``);
      ``tp_timeout_s``: the longest any collective or step may take before the group is
      declared failed (`twinserve.engine.tp.errors.TPGroupError`); ``tp_start_timeout_s``: the
      longest the group's startup may take (followers starting Python and torch, joining the
      rendezvous, building their shard, agreeing on the KV pool), kept apart so that a short
      step limit does not also cut a slow start. With ``tp_size > 1`` decode
      runs eager unless ``tp_cuda_graphs`` (experimental: the one two-GPU run so far hung with
      graphs on; see docs/engine.md).
    """

    model: str
    device: str = "auto"
    dtype: str = "auto"
    load_format: str = "safetensors"
    page_size: int = scheduler_default("page_size")
    mem_fraction: float = KvBudget.mem_fraction
    num_pages: int | None = None
    cpu_kv_tokens: int = 65536
    max_model_len: int | None = None
    scheduler: Any = field(default_factory=dict)
    scheduling: str = "fcfs"
    memory: str = "on_demand"
    cache: str = "radix"
    scheduling_kwargs: Mapping[str, Any] = field(default_factory=dict)
    memory_kwargs: Mapping[str, Any] = field(default_factory=dict)
    cache_kwargs: Mapping[str, Any] = field(default_factory=dict)
    cuda_graphs: bool = True
    max_graph_bs: int = DEFAULT_PLAN.max_graph_bs
    piecewise_max_tokens: int = DEFAULT_PLAN.piecewise_max_tokens
    token_graph_mode: str = DEFAULT_PLAN.token_graph_mode
    hybrid_decode_heavy: bool = DEFAULT_PLAN.hybrid_decode_heavy
    token_graph_rows: int = DEFAULT_PLAN.token_graph_rows
    overlap: bool | None = None
    attention_backend: str = "auto"
    kernels: str = "auto"
    decode_tensor_cores: bool | None = None
    fast_plan: bool = True
    prefill_backend: str = "fa2"
    triton_kernels: bool | None = None
    seed: int = 0
    tp_size: int = 1
    tp_timeout_s: float = 300.0
    tp_start_timeout_s: float = 600.0
    tp_cuda_graphs: bool = False
    checked: bool = False
    spec: Any = field(default_factory=dict)

    def check(self) -> None:
        """The fields a user sets that no engine can take are a `UserError` naming the field:
        the device, dtype and load format (`check_backend_values`), and the sizes of the pool."""
        check_backend_values({k: getattr(self, k) for k in ("device", "dtype", "load_format", "cpu_kv_tokens")})
        if self.page_size < 1:
            raise bad_value("page_size", self.page_size, "allowed: >= 1")
        if not 0 < self.mem_fraction <= 1:
            raise bad_value("mem_fraction", self.mem_fraction, "allowed: > 0 and <= 1")
        if self.num_pages is not None and self.num_pages < 1:
            raise bad_value("num_pages", self.num_pages, "allowed: >= 1, or None (from the device memory)")
        if self.tp_size < 1:
            raise bad_value("tp_size", self.tp_size, "allowed: >= 1")

    def uses_triton_kernels(self, cuda: bool) -> bool:
        """Whether the engine on this device runs `engine.triton`'s kernels (``triton_kernels``)."""
        if self.triton_kernels is False or not cuda:
            return False
        from twinserve.engine.triton import available

        return available()

    def scheduler_config(self, num_pages: int, max_model_len: int) -> SchedulerConfig:
        """The scheduler's config: ``self.scheduler`` with the engine-owned fields set."""
        src = self.scheduler
        if isinstance(src, SchedulerConfig):
            values = {f.name: getattr(src, f.name) for f in fields(SchedulerConfig)}
        else:
            values = dict(src or {})
            unknown = set(values) - {f.name for f in fields(SchedulerConfig)}
            if unknown:
                raise ValueError(f"unknown scheduler fields: {sorted(unknown)}")
        values.update(page_size=self.page_size, num_pages=num_pages)
        values["max_model_len"] = min(int(values.get("max_model_len", max_model_len)), max_model_len)
        cfg = SchedulerConfig(**values)
        cfg.validate()
        return cfg

    def graph_plan(self, graphs: bool, max_running: int, gqa_group: int) -> GraphPlan:
        """The engine's `GraphPlan`: this config's graph knobs, no token graphs when the engine
        captures no graphs (``graphs=False``), the scheduler's ``max_running`` and the model's
        query heads per KV head on one rank (``gqa_group``)."""
        plan = GraphPlan(max_graph_bs=self.max_graph_bs, piecewise_max_tokens=self.piecewise_max_tokens,
                         token_graph_mode=self.token_graph_mode, hybrid_decode_heavy=self.hybrid_decode_heavy,
                         max_running=max_running, gqa_group=gqa_group, token_graph_rows=self.token_graph_rows)
        return plan if graphs else plan.without_token_graphs()


# The run config's ``backend`` keys that set `EngineConfig` fields of the same name (None: the default).
RUN_BACKEND_KEYS = ("device", "dtype", "load_format", "cuda_graphs", "overlap", "attention_backend",
                    "cpu_kv_tokens", "fast_plan")


def check_backend_values(backend: Mapping[str, Any]) -> None:
    """The ``backend`` keys a run sets that name a device, a dtype or a load format hold known
    values, and ``cpu_kv_tokens`` is positive; else a `UserError` naming the key. None keeps
    the `EngineConfig` default. Imports torch (the dtypes and load formats are the engine's)."""
    from twinserve.engine.loader import LOAD_FORMATS
    from twinserve.engine.model_config import DTYPE_NAMES

    device, dtype, fmt = backend.get("device"), backend.get("dtype"), backend.get("load_format")
    if device is not None and not re.fullmatch(DEVICE_PATTERN, str(device)):
        raise bad_value("backend.device", device, "allowed: auto, cpu, cuda or cuda:N")
    if dtype is not None and str(dtype) != "auto" and str(dtype) not in DTYPE_NAMES:
        raise UnknownNameError("dtype", str(dtype), ["auto", *DTYPE_NAMES], "backend.dtype")
    if fmt is not None and str(fmt) not in LOAD_FORMATS:
        raise UnknownNameError("load format", str(fmt), LOAD_FORMATS.names(), "backend.load_format")
    kv = backend.get("cpu_kv_tokens")
    if kv is not None and int(kv) < 1:
        raise bad_value("backend.cpu_kv_tokens", kv, "allowed: >= 1 (tokens of KV pool on the CPU)")


def engine_config_from_run(cfg: Mapping[str, Any], model_path: str, **over: Any) -> EngineConfig:
    """The `EngineConfig` of a composed run config (`twinserve-run backend=engine` and
    `twinserve-serve` alike), from its `core.run_config.RunChoices`: the batch knobs (with
    ``model.max_model_len`` as the scheduler's), the page size and graph knobs where given, the
    policies, the pool from ``kv``, ``seed``, ``tp``, ``spec``; and the ``backend`` keys of
    `RUN_BACKEND_KEYS`; ``over`` sets any field last. No torch import: `Engine` checks the
    values (`check_backend_values`)."""
    rc = from_cfg(cfg)
    backend = cfg.get("backend") or {}
    sched = dict(rc.batching)
    if rc.max_model_len is not None:
        sched["max_model_len"] = rc.max_model_len
    owned: dict[str, Any] = {k: type(getattr(DEFAULT_PLAN, k))(v) for k, v in rc.graphs.items()}
    if rc.page_size_given:
        owned["page_size"] = rc.page_size
    pol = rc.policies
    kw: dict[str, Any] = dict(
        model=str(model_path), **owned, mem_fraction=rc.mem_fraction, num_pages=rc.num_pages, scheduler=sched,
        scheduling=pol.scheduling, memory=pol.memory, cache=pol.cache, scheduling_kwargs=pol.scheduling_kwargs,
        memory_kwargs=pol.memory_kwargs, cache_kwargs=pol.cache_kwargs, seed=rc.seed, tp_size=rc.tp,
        spec=dict(rc.spec), **{k: backend[k] for k in RUN_BACKEND_KEYS if backend.get(k) is not None})
    kw.update(over)
    return EngineConfig(**kw)
