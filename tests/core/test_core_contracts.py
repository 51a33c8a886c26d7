"""The contracts in core/contracts.py declare everything the scheduler uses, and the policies
implement all of it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import twinserve
from twinserve.core import contracts
from twinserve.policies.memory.allocator import PageAllocator
from twinserve.policies.registries import CACHE, MEMORY, SCHEDULING

ROOT = Path(twinserve.__file__).parent
# the modules that drive policies, caches and allocators, and the component each attribute names
USERS = ["core/scheduler.py", "simulator/stretch.py"]
COMPONENTS = {"policy": contracts.SchedulingLike, "memory": contracts.MemoryLike,
              "cache": contracts.CacheLike, "allocator": contracts.AllocatorLike}


def members(proto: type) -> set[str]:
    names = {n for n in vars(proto) if not n.startswith("_")}
    return names | set(getattr(proto, "__annotations__", {}))


def used_members(source: str) -> dict[str, set[str]]:
    """``{component: attributes}`` read or called on ``<x>.policy``, ``<x>.cache``, ... and on
    local names bound to them (``cache = self.cache``), plus ``stats`` of the cache."""
    tree = ast.parse(source)
    alias: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) \
                and node.value.attr in COMPONENTS:
            for t in node.targets:
                if isinstance(t, ast.Name):
                    alias[t.id] = node.value.attr
    used: dict[str, set[str]] = {c: set() for c in [*COMPONENTS, "stats"]}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        comp = None
        if isinstance(base, ast.Attribute) and base.attr in COMPONENTS and isinstance(base.value, ast.Name):
            comp = base.attr
        elif isinstance(base, ast.Name) and base.id in alias:
            comp = alias[base.id]
        elif isinstance(base, ast.Attribute) and base.attr == "stats":
            comp = "stats"
        if comp is not None:
            used[comp].add(node.attr)
    return used


@pytest.mark.parametrize("path", USERS)
def test_every_member_the_scheduler_uses_is_declared(path: str) -> None:
    source = (ROOT / path).read_text()
    used = used_members(source)
    assert used["cache"] and used["policy"], "the collector found nothing: the test would prove nothing"
    for comp, proto in [*COMPONENTS.items(), ("stats", contracts.CacheStatsLike)]:
        missing = used[comp] - members(proto)
        assert not missing, f"{path} uses {comp}.{sorted(missing)}, which {proto.__name__} does not declare"


@pytest.mark.parametrize("path", USERS)
def test_no_optional_member_is_probed(path: str) -> None:
    calls = [n for n in ast.walk(ast.parse((ROOT / path).read_text()))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")]
    assert not calls, f"{path} probes attributes at lines {[c.lineno for c in calls]}"


def test_the_collector_sees_an_undeclared_call() -> None:
    used = used_members("def f(self):\n    cache = self.cache\n    cache.secret(1)\n    self.policy.other\n")
    assert "secret" not in members(contracts.CacheLike) and used["cache"] == {"secret"}
    assert used["policy"] == {"other"}


def _instances() -> list[tuple[object, type]]:
    out: list[tuple[object, type]] = [(PageAllocator(8), contracts.AllocatorLike)]
    out += [(CACHE.create(n, page_size=4), contracts.CacheLike) for n in CACHE.names()]
    out += [(MEMORY.create(n), contracts.MemoryLike) for n in MEMORY.names()]
    out += [(SCHEDULING.create(n), contracts.SchedulingLike) for n in SCHEDULING.names()]
    return out


@pytest.mark.parametrize("obj,proto", _instances(), ids=lambda x: type(x).__name__ if not inspect.isclass(x) else x.__name__)
def test_every_registered_policy_implements_its_whole_contract(obj: object, proto: type) -> None:
    missing = [m for m in members(proto) if not hasattr(obj, m)]
    assert not missing, f"{type(obj).__name__} lacks {missing}"
    assert isinstance(obj, proto)


def test_tracks_compute_has_one_default() -> None:
    from twinserve.policies.scheduling.base import SchedulingPolicy
    from twinserve.policies.scheduling.vtc import VirtualTokenCounter

    assert SchedulingPolicy.tracks_compute is False and VirtualTokenCounter.tracks_compute is True
    owners = [c.__name__ for c in SCHEDULING.get("fcfs").__mro__ if "tracks_compute" in vars(c)]
    assert owners == ["SchedulingPolicy"]
