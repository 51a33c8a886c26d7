"""``twinserve-serve``'s configuration: the run config's conf tree plus the `ServerConfig` knobs.

The tree is composed from ``twinserve/conf`` (`core.conf_path`, the same one ``twinserve-run``
uses, validated against `core.conf_schema`) with ``backend=engine`` unless another backend is
given, so ``backend.device=cpu`` etc. apply. ``server.*`` overrides of the schema's ``server``
keys (``server.port=8000 server.queue_limit=64``) are Hydra overrides; those of the other
`ServerConfig` fields (``server.max_n=4``) set them on top. The engine is configured exactly
like the ``engine`` backend: ``model.path``, ``scheduler`` knobs and name, ``memory``,
``cache``, ``kv``, ``seed``, ``tp``; ``replicas``, ``router`` and ``router_kwargs`` set how many
engine workers serve behind which router.
"""

from __future__ import annotations

import importlib.util
from dataclasses import fields
from typing import Any, Mapping

from twinserve.core.conf_compose import compose
from twinserve.core.conf_path import conf_dir
from twinserve.core.conf_schema import ServerNode
from twinserve.core.config_checks import (NamedKey, check_group_options, check_mandatory, check_model, check_names,
                                          check_ranges, check_tp, registry_names)
from twinserve.core.errors import UserError, bad_value
from twinserve.core.run_config import from_cfg
from twinserve.server.config import ServerConfig

# The registry names the served engine uses.
SERVED_NAMES: tuple[NamedKey, ...] = (
    NamedKey("scheduler.name", "scheduling policy", registry_names("twinserve.policies", "SCHEDULING")),
    NamedKey("memory.name", "memory policy", registry_names("twinserve.policies", "MEMORY")),
    NamedKey("cache.name", "prefix cache", registry_names("twinserve.policies", "CACHE")),
    NamedKey("router", "router", registry_names("twinserve.policies", "ROUTING")),
)


def split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra overrides, ``server.*`` assignments without the prefix): the ``server`` keys of
    the run config's schema (`core.conf_schema.ServerNode`) are Hydra overrides, validated at
    composition; the other `ServerConfig` fields are assignments."""
    in_schema = {f.name for f in fields(ServerNode)}
    hydra_ov: list[str] = []
    server_ov: list[str] = []
    for o in overrides:
        key = o.lstrip("+~")
        if key.startswith("server.") and key[len("server."):].split("=")[0].split(".")[0] not in in_schema:
            server_ov.append(key[len("server."):])
        else:
            hydra_ov.append(o)
    if not any(o.lstrip("+~").split("=")[0] == "backend" for o in hydra_ov):
        hydra_ov.insert(0, "backend=engine")
    return hydra_ov, server_ov


def _plain(node: Any) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, (DictConfig, ListConfig)):
        return OmegaConf.to_container(node, resolve=True)
    return node


def engine_config_from(cfg: Mapping[str, Any]) -> Any:
    """An `EngineConfig` from a composed run config (`engine.config.engine_config_from_run`, the
    engine backend's mapping) for the checkpoint at ``model.path``."""
    from twinserve.engine.config import engine_config_from_run

    model = cfg["model"]
    if not model.get("path"):
        raise UserError("twinserve-serve needs model.path=DIR (a checkpoint with tokenizer files; "
                        "`twinserve-make-model --shape tiny-llama --out DIR` writes one)", "model.path")
    return engine_config_from_run(cfg, str(model["path"]), max_model_len=model.get("max_model_len"))


def server_config_from(cfg: Mapping[str, Any], assignments: list[str]) -> ServerConfig:
    from omegaconf import OmegaConf

    known = {f.name for f in fields(ServerConfig)}
    rc = from_cfg(cfg)
    base = dict(rc.server, replicas=rc.replicas, router=rc.router, router_kwargs=dict(rc.router_kwargs))
    base.update(_plain(OmegaConf.from_dotlist(assignments)))
    if base.get("replica_urls") is not None:
        base["replica_urls"] = [str(u).rstrip("/") for u in base["replica_urls"]] \
            if isinstance(base["replica_urls"], list) else base["replica_urls"]
    unknown = set(base) - known
    if unknown:
        raise UserError(f"unknown server keys {sorted(unknown)}; known: {sorted(known)}", "server")
    sc = ServerConfig(**base)
    try:
        sc.validate()
    except ValueError as e:
        raise UserError(f"server: {e}", "server") from None
    return sc


def check_served(cfg: Mapping[str, Any]) -> None:
    """The composed config's mistakes a user can fix, before any process starts: keys left at
    ``???``, unknown policy or router names, a number out of its range
    (`core.config_checks.RANGED_KEYS`), a missing ``model.path`` or one without a tokenizer or
    weights (unless ``backend.load_format=dummy``), a ``tp`` the model cannot split."""
    import json
    from pathlib import Path

    from twinserve.core.model_shapes import ModelShape

    missing = [m for m in ("torch", "fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"twinserve-serve needs {', '.join(missing)}, which is not installed; install the "
                        f"'engine,server' extras: pip install torch==2.13.0 (CPU; or a CUDA build) && "
                        f"pip install -e '.[engine,server]'")
    check_mandatory(cfg)
    check_names(cfg, SERVED_NAMES)
    check_ranges(cfg)
    check_model(cfg)
    path = (cfg.get("model") or {}).get("path")
    if path:
        p = Path(str(path))
        shape = ModelShape.from_hf_config(json.loads((p / "config.json" if p.is_dir() else p).read_text()),
                                          name=p.name)
        check_tp(int(cfg.get("tp", 1)), shape)
        if p.is_dir() and not (p / "tokenizer.json").exists():
            raise bad_value("model.path", path, "the directory has no tokenizer.json, which the server "
                                                "encodes and decodes text with; twinserve-make-model writes one")
        dummy = (cfg.get("backend") or {}).get("load_format") == "dummy"
        if p.is_dir() and not dummy and not any(p.glob("*.safetensors")):
            raise bad_value("model.path", path, "the directory holds no weights (*.safetensors); write a "
                                                "checkpoint with twinserve-make-model, or serve random weights "
                                                "with backend.load_format=dummy")


def compose_server_config(overrides: list[str]) -> tuple[Any, ServerConfig]:
    """Compose the tree with ``overrides``; returns (EngineConfig, ServerConfig). With
    ``server.replica_urls`` the server proxies to those URLs: the EngineConfig is None and no
    model is needed."""
    hydra_ov, server_ov = split_overrides(overrides)
    check_group_options(hydra_ov, conf_dir())
    cfg = _plain(compose(hydra_ov, job_name="twinserve-serve"))
    server_cfg = server_config_from(cfg, server_ov)
    if server_cfg.replica_urls is not None:
        check_names({**cfg, "replicas": 2}, SERVED_NAMES[-1:])  # the proxy always builds its router
        return None, server_cfg
    check_served(cfg)
    return engine_config_from(cfg), server_cfg
