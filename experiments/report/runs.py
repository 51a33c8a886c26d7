"""Run folders: find them on disk and read what one run wrote."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import yaml

SUMMARY = "summary.json"
REQUESTS = "requests.parquet"
STEPS = "steps.parquet"


@dataclass(slots=True)
class RunFolder:
    """One run's output folder (a Hydra job folder holding ``summary.json``).

    ``summary`` is the parsed summary.json; ``overrides`` the Hydra overrides of the job as
    ``key -> value`` (keys without ``+``/``++``/``~`` prefixes, values parsed as YAML scalars);
    ``config`` the composed Hydra config (empty when ``.hydra/config.yaml`` is missing). The
    per-request and per-step tables are read lazily, on demand, since a sweep may hold many.
    """

    path: Path
    summary: dict[str, Any]
    overrides: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | str) -> "RunFolder":
        path = Path(path)
        summary = json.loads((path / SUMMARY).read_text())
        hydra_dir = path / ".hydra"
        overrides: dict[str, Any] = {}
        if (hydra_dir / "overrides.yaml").exists():
            overrides = parse_overrides(yaml.safe_load((hydra_dir / "overrides.yaml").read_text()) or [])
        config: dict[str, Any] = {}
        if (hydra_dir / "config.yaml").exists():
            config = yaml.safe_load((hydra_dir / "config.yaml").read_text()) or {}
        return cls(path=path, summary=summary, overrides=overrides, config=config)

    def requests(self) -> pd.DataFrame:
        """The per-request table (empty frame when the run wrote none)."""
        return _read_parquet(self.path / REQUESTS)

    def steps(self) -> pd.DataFrame:
        """The per-step table (empty frame when the run wrote none)."""
        return _read_parquet(self.path / STEPS)


def _read_parquet(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def parse_value(text: str) -> Any:
    """A Hydra override value as a Python scalar: ``4`` -> 4, ``0.5`` -> 0.5, ``true`` -> True,
    ``null`` -> None; anything YAML cannot read as a scalar stays the original string."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, (dict, list)):
        return text
    return value


def parse_overrides(lines: Iterable[str]) -> dict[str, Any]:
    """Parse Hydra's overrides.yaml entries (``key=value``) into a dict.

    Leading ``+``, ``++`` and ``~`` are dropped from keys; a deletion (``~key`` without value)
    maps to None. Later entries win, as in Hydra.
    """
    out: dict[str, Any] = {}
    for line in lines:
        line = str(line).strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key = key.lstrip("+~").strip()
        out[key] = parse_value(value.strip()) if sep else None
    return out


def find_runs(paths: Iterable[Path | str]) -> list[Path]:
    """Every run folder under ``paths``: a folder is a run when it holds ``summary.json``.

    Accepts run folders, Hydra multirun folders, or any folder above them (searched
    recursively). Result is sorted and free of duplicates; a path that does not exist raises
    ``FileNotFoundError``.
    """
    found: set[Path] = set()
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"no such run folder: {p}")
        if p.is_file() and p.name == SUMMARY:
            found.add(p.parent.resolve())
            continue
        found.update(s.parent.resolve() for s in p.rglob(SUMMARY))
    return sorted(found, key=_natural_key)


def _natural_key(path: Path) -> tuple:
    """Sort ``sweep/2`` before ``sweep/10``."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in path.parts)


def load_runs(paths: Iterable[Path | str]) -> list[RunFolder]:
    return [RunFolder.load(p) for p in find_runs(paths)]
