"""`RankExecutor`: one tensor-parallel rank's share of an engine (no scheduler).

Rank 0's `Engine` and every follower rank (engine/tp/follower.py) build exactly this object from
the same `EngineConfig`, so all ranks hold matching shards, pools and captured graphs.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, Callable

import torch

from twinserve.core.capture_schedule import CaptureItem, capture_schedule
from twinserve.core.config import SchedulerConfig, scheduler_default
from twinserve.core.errors import UserError
from twinserve.core.graph_plan import GraphPlan
from twinserve.core.spec import SpecConfig
from twinserve.engine.attention import ATTENTION, AttentionSpec
from twinserve.engine.capture_log import CaptureLog
from twinserve.engine.config import EngineConfig
from twinserve.engine.kv_pool import KVGeometry, KVPool
from twinserve.engine.layers.kernels import KERNELS, auto_kernels
from twinserve.engine.layers.linear import kv_head_layout
from twinserve.engine.layers.parallel import SINGLE, TPGroup
from twinserve.engine.loader import load_weights
from twinserve.engine.memory_plan import activation_reserve, plan_num_pages
from twinserve.engine.model_config import ModelConfig, parse_dtype
from twinserve.engine.models import build_model
from twinserve.engine.runner import ModelRunner, synchronize_event
from twinserve.engine.sampler import Sampler
from twinserve.engine.spec_draft import DraftRuntime, target_side_pages
from twinserve.engine.token_graphs import TOKEN_GRAPHS


def resolve_device(name: str, rank: int = 0) -> torch.device:
    """The device of tensor-parallel ``rank``: "auto" → cuda:rank if CUDA is available else cpu;
    "cuda" → cuda:rank; "cuda:i" → cuda:(i + rank); "cpu" → cpu (every rank)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(name)
    if dev.type != "cuda":
        return dev
    return torch.device("cuda", (dev.index or 0) + rank)


def require_device(dev: torch.device) -> None:
    """A `UserError` when ``dev`` is a CUDA device and this torch sees none."""
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device={dev}, but this torch ({torch.__version__}) sees no CUDA device; "
                        f"use device=cpu (backend.device=cpu) or auto", "backend.device")


def model_max_len(mc: ModelConfig, cfg: EngineConfig) -> int:
    n = mc.max_position_embeddings
    window = mc.raw.get("sliding_window")
    if window and mc.raw.get("use_sliding_window", True):
        n = min(n, int(window))  # never longer than the window: no token ever slides out
    if cfg.max_model_len:
        n = min(n, int(cfg.max_model_len))
    return n


def _same(n: int) -> int:
    return n


def _log_of(schedule: list[CaptureItem]) -> CaptureLog:
    return CaptureLog(schedule)


class RankExecutor:
    """Model shard, KV pool, attention backend and runner of one rank.

    Contract: built from ``cfg`` and the rank's `TPGroup`; holds ``num_heads/tp`` query heads
    and its kv heads (`kv_head_layout`) in every layer, and a KV pool of those kv heads only.
    The pool's page count is ``agree_pages(local capacity)``: a tensor-parallel group passes
    the minimum over ranks, so every rank's pool addresses the same page ids. ``sched_config``
    is derived from that count identically on every rank, and so is ``plan`` (the `GraphPlan`
    the runner captures its graphs by). ``runner`` executes steps.

    Graph capture follows ``capture_log`` (a `CaptureLog` that ``make_log`` builds from
    `capture_schedule` of the plan, also when graphs are off and nothing is captured); before
    capturing, ``agree_schedule(schedule)`` lets a tensor-parallel group check that every rank
    follows the same one (it raises if not); after capturing, the log's records are checked
    against its schedule.
    """

    def __init__(self, cfg: EngineConfig, tp: TPGroup = SINGLE, rank_device: torch.device | None = None,
                 agree_pages: Callable[[int], int] = _same,
                 wait_event: Callable[[object], None] = synchronize_event,
                 make_log: Callable[[list[CaptureItem]], CaptureLog] = _log_of,
                 agree_schedule: Callable[[list[CaptureItem]], None] | None = None) -> None:
        self.cfg = cfg
        self.tp = tp
        TOKEN_GRAPHS.get(cfg.token_graph_mode)  # an unknown mode fails here, also without graphs
        self.device = rank_device or resolve_device(cfg.device, tp.rank)
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.set_device(self.device)
        self.model_config = mc = ModelConfig.from_dir(cfg.model)
        if cfg.dtype == "auto":
            self.dtype = parse_dtype(mc.torch_dtype) if cuda else torch.float32
        else:
            self.dtype = parse_dtype(cfg.dtype)
        self.max_model_len = model_max_len(mc, cfg)
        torch.manual_seed(cfg.seed)

        attn_name = cfg.attention_backend if cfg.attention_backend != "auto" else ("flashinfer" if cuda else "torch")
        fused = cfg.uses_triton_kernels(cuda)
        kern_name = cfg.kernels if cfg.kernels != "auto" else auto_kernels(attn_name, fused)
        self.model = build_model(mc, KERNELS.create(kern_name), self.dtype, self.device, tp=tp,
                                 max_positions=self.max_model_len + 1)
        load_weights(self.model, cfg.model, cfg.load_format, cfg.seed)

        local_heads = tp.shard(mc.num_heads, "num_heads")
        _, local_kv = kv_head_layout(mc.num_kv_heads, tp)
        sched_fields = cfg.scheduler if isinstance(cfg.scheduler, dict) else {}
        budget = sched_fields.get("max_num_batched_tokens", scheduler_default("max_num_batched_tokens"))
        max_tokens = int(getattr(cfg.scheduler, "max_num_batched_tokens", budget))
        geom0 = KVGeometry(mc.num_layers, 0, cfg.page_size, local_kv, mc.head_dim, self.dtype)
        local_pages = cfg.num_pages or plan_num_pages(
            geom0, self.device, cfg.mem_fraction,
            activation_reserve(mc, max_tokens, cfg.max_graph_bs, self.dtype, tp.size), cfg.cpu_kv_tokens)
        num_pages = agree_pages(int(local_pages))
        graphs = cfg.cuda_graphs and cuda and (tp.size == 1 or cfg.tp_cuda_graphs)
        self.sched_config: SchedulerConfig = cfg.scheduler_config(num_pages, self.max_model_len)
        spec_cfg = SpecConfig.of(cfg.spec)
        side = target_side_pages(spec_cfg, cfg.page_size, self.sched_config.max_running)
        self.pool = KVPool(replace(geom0, num_pages=num_pages), self.device, fused_store=fused, side_pages=side)
        self.plan: GraphPlan = cfg.graph_plan(graphs, self.sched_config.max_running, max(1, local_heads // local_kv))
        plan = self.plan
        self.capture_log = make_log(capture_schedule(plan))
        if agree_schedule is not None:
            agree_schedule(self.capture_log.schedule)

        max_pages_per_seq = -(-self.max_model_len // cfg.page_size) + 1
        spec = AttentionSpec(local_heads, local_kv, mc.head_dim, self.dtype, self.pool, max_pages_per_seq)
        kw: dict[str, Any] = {}
        if attn_name == "flashinfer":
            kw["decode_tensor_cores"] = cfg.decode_tensor_cores
            kw["fast_plan"] = cfg.fast_plan
            kw["prefill_backend"] = cfg.prefill_backend
        self.attn = ATTENTION.create(attn_name, spec=spec, **kw)
        if attn_name == "flashinfer":
            kw["workspace"] = self.attn.workspace
        self.draft_runtime = DraftRuntime(partial(ATTENTION.create, attn_name, **kw), spec, graphs,
                                          self.sched_config.max_running, spec_cfg.num_tokens)
        self.runner = ModelRunner(self.model, self.pool, self.attn, Sampler(self.device, cfg.seed, fused=fused),
                                  use_graphs=graphs, plan=plan, wait_event=wait_event,
                                  capture_log=self.capture_log)
        if graphs:
            self.capture_log.check()
