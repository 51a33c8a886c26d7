"""The run config's schema: dataclasses that Hydra validates the composed conf tree against.

`register` stores them in Hydra's ConfigStore; the conf tree names them as the first entry of a
defaults list (``conf/config.yaml``: ``- base_config``; ``conf/backend/sim.yaml``:
``- base_sim``), so composing rejects an unknown key or a value of the wrong type with Hydra's
own message, whether it comes from a file or the command line.

Contract: a schema fixes the keys and their types, never their values: every field without a
default is ``MISSING`` and takes its value from the yaml file, so each default stays written
once (in the conf tree, or in the dataclass that reads the key). Optional fields defaulting to
None are keys the tree does not write, None meaning "the reading dataclass's default".
The groups whose keys depend on the registry entry they name (``model``, ``workload``,
``scheduler``, ``cost_model``) stay open (``Any``): their builders check them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

BASE_CONFIG = "base_config"


@dataclass
class PolicyNode:
    """A ``memory`` or ``cache`` option: a registry name and its constructor kwargs."""

    name: str = MISSING
    kwargs: Dict[str, Any] = MISSING


@dataclass
class HardwareNode:
    """A ``hardware`` preset by name; each non-null ceiling overrides the preset's."""

    name: str = MISSING
    flops: Optional[float] = MISSING
    hbm_bw: Optional[float] = MISSING
    link_bw: Optional[float] = MISSING
    memory: Optional[float] = MISSING


@dataclass
class SimBackendNode:
    """``backend=sim``: the simulator's loop (`experiments.backends.sim`)."""

    name: str = MISSING
    fast_forward: bool = MISSING
    check_invariants: bool = MISSING
    noise: bool = MISSING
    keep_steps: bool = MISSING
    max_stretch: int = MISSING
    pipeline: bool = MISSING
    lag_arrivals: Any = MISSING     # auto | true | false
    host_speed_from: Optional[str] = MISSING
    host_episodes: Any = MISSING    # auto | true | false
    share_gpu: bool = MISSING


@dataclass
class EngineBackendNode:
    """``backend=engine``: the `EngineConfig` fields a run sets (`engine.config.RUN_BACKEND_KEYS`)
    and the replay's warm-up."""

    name: str = MISSING
    device: Optional[str] = MISSING
    dtype: Optional[str] = MISSING
    load_format: Optional[str] = MISSING
    cuda_graphs: Optional[bool] = MISSING
    overlap: Optional[bool] = MISSING
    attention_backend: Optional[str] = MISSING
    cpu_kv_tokens: Optional[int] = MISSING
    fast_plan: Optional[bool] = MISSING
    warmup: bool = MISSING


@dataclass
class ServerBackendNode:
    """``backend=server``: the bench client's `BenchConfig` (`server.bench_client`); the
    optional fields left None take `BenchConfig`'s defaults."""

    name: str = MISSING
    url: str = MISSING
    model_name: Optional[str] = MISSING
    endpoint: str = MISSING
    timeout_s: float = MISSING
    prompt_format: str = MISSING
    max_concurrency: Optional[int] = MISSING
    send_tenant_priority: bool = MISSING
    api_key: Optional[str] = MISSING
    tokenizer_path: Optional[str] = None
    temperature: Optional[float] = None
    ignore_eos: Optional[bool] = None
    transport: Optional[str] = None
    extra_body: Optional[Dict[str, Any]] = None
    metrics_interval_s: Optional[float] = None


@dataclass
class SpecNode:
    """``spec``: `core.spec.SpecConfig`'s fields (None: its default)."""

    method: str = MISSING
    num_tokens: int = MISSING
    draft: str = MISSING
    max_batch_size: Any = MISSING   # a batch size (0: no limit) or auto
    acceptance: Any = MISSING       # a rate, or one rate per proposed position
    acceptance_file: str = MISSING
    ngram_min: Optional[int] = None
    ngram_max: Optional[int] = None


@dataclass
class KvNode:
    """``kv``: the KV pool's size (`simulator.kv_plan`, `EngineConfig`)."""

    mem_fraction: Optional[float] = MISSING
    num_pages: Optional[int] = MISSING
    dtype_bytes: Optional[int] = MISSING


@dataclass
class SloNode:
    """``slo``: goodput thresholds in ms (null: none)."""

    ttft_ms: Optional[float] = MISSING
    tpot_ms: Optional[float] = MISSING
    e2e_ms: Optional[float] = MISSING


@dataclass
class ServerNode:
    """``server``: twinserve-serve's listener (`server.config.ServerConfig`) and the bench
    client's targets (``base_url``, ``replica_urls``)."""

    host: Optional[str] = MISSING
    port: Optional[int] = MISSING
    queue_limit: Optional[int] = MISSING
    base_url: Optional[str] = MISSING
    replica_urls: Optional[List[str]] = MISSING


@dataclass
class RunConfig:
    """The composed run config's top level (``conf/config.yaml``)."""

    backend: Any = MISSING
    model: Any = MISSING
    hardware: HardwareNode = field(default_factory=HardwareNode)
    workload: Any = MISSING
    scheduler: Any = MISSING
    memory: PolicyNode = field(default_factory=PolicyNode)
    cache: PolicyNode = field(default_factory=PolicyNode)
    cost_model: Any = MISSING
    seed: int = MISSING
    tp: int = MISSING
    replicas: int = MISSING
    router: str = MISSING
    router_kwargs: Dict[str, Any] = MISSING
    progress: Optional[bool] = MISSING
    print_summary: bool = MISSING
    spec: SpecNode = field(default_factory=SpecNode)
    kv: KvNode = field(default_factory=KvNode)
    slo: SloNode = field(default_factory=SloNode)
    server: ServerNode = field(default_factory=ServerNode)


# (group, option name, schema): the bases the conf tree's defaults lists name.
SCHEMAS: tuple[tuple[str | None, str, type], ...] = (
    (None, BASE_CONFIG, RunConfig),
    ("backend", "base_sim", SimBackendNode),
    ("backend", "base_engine", EngineBackendNode),
    ("backend", "base_server", ServerBackendNode),
)


def register() -> None:
    """Store `SCHEMAS` in Hydra's ConfigStore (storing again replaces them: idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for group, name, node in SCHEMAS:
        cs.store(group=group, name=name, node=node, provider="twinserve")
