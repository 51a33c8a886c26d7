"""Checks of a `twinserve-run` config before anything runs (`core.config_checks` plus the
experiment app's own: the registry names it uses, ``workload.path``, the backend's packages and
replica count); each failure is a `UserError`."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twinserve.core.config_checks import (NamedKey, check_mandatory, check_model, check_names, check_ranges,
                                          lookup, registry_names)
from twinserve.core.errors import UserError, bad_value

# The config keys that hold a registry name, and the registry each is looked up in.
NAMED_KEYS: tuple[NamedKey, ...] = (
    NamedKey("backend.name", "backend", registry_names("twinserve.experiments.backends", "BACKENDS")),
    NamedKey("scheduler.name", "scheduling policy", registry_names("twinserve.policies", "SCHEDULING")),
    NamedKey("memory.name", "memory policy", registry_names("twinserve.policies", "MEMORY")),
    NamedKey("cache.name", "prefix cache", registry_names("twinserve.policies", "CACHE")),
    NamedKey("router", "router", registry_names("twinserve.policies", "ROUTING")),
    NamedKey("workload.name", "workload", registry_names("twinserve.core.workload.builders", "WORKLOADS")),
    NamedKey("cost_model.name", "cost model", registry_names("twinserve.simulator.cost", "COST_MODELS"), ("auto",)),
    NamedKey("hardware.name", "hardware", registry_names("twinserve.simulator.hardware", "HARDWARE")),
)

# Python packages each backend imports, and the extra of twinserve that installs them.
BACKEND_NEEDS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "engine": (("torch", "engine"), ("transformers", "engine")),
    "server": (("torch", "engine"), ("fastapi", "server"), ("uvicorn", "server")),
}
INSTALL_HINT = "pip install torch==2.13.0 (CPU; or a CUDA build) && pip install -e '.[{extras}]'"


def check_workload_path(cfg: Mapping[str, Any]) -> None:
    """``workload.path``, where the workload has one, names an existing file."""
    from twinserve.core.workload.loaders import BUNDLED

    path = lookup(cfg, "workload.path")
    if path is None or str(path) in BUNDLED:
        return
    if not Path(str(path)).is_file():
        raise bad_value("workload.path", path, "no such file (give the path of a trace file)")


def check_backend(cfg: Mapping[str, Any]) -> None:
    """The backend's packages are installed, and ``replicas`` is 1 unless it runs several."""
    from twinserve.experiments.backends import BACKENDS

    name = str(lookup(cfg, "backend.name"))
    missing = [(mod, extra) for mod, extra in BACKEND_NEEDS.get(name, ())
               if importlib.util.find_spec(mod) is None]
    if missing:
        extras = ",".join(sorted({e for _, e in missing}))
        mods = ", ".join(m for m, _ in missing)
        raise UserError(f"backend={name} needs {mods}, which is not installed; install the "
                        f"'{extras}' extra: {INSTALL_HINT.format(extras=extras)}", "backend.name")
    replicas = int(cfg.get("replicas", 1) or 1)
    if replicas > 1 and name in BACKENDS and not getattr(BACKENDS.get(name), "multi_replica", False):
        able = [n for n in BACKENDS.names() if getattr(BACKENDS.get(n), "multi_replica", False)]
        raise bad_value("replicas", replicas, f"backend={name} runs one replica; allowed: replicas=1, "
                                              f"or backend={'|'.join(able)} for several")


def check_config(cfg: Mapping[str, Any]) -> None:
    """The checks that need only the resolved config (plain dicts), in the order a user would
    fix them."""
    check_mandatory(cfg)
    check_names(cfg, NAMED_KEYS)
    check_ranges(cfg)
    check_model(cfg)
    check_workload_path(cfg)
    check_backend(cfg)
