"""The import graph between twinserve's top-level packages: no cycles, and the packages a policy
developer runs (core, policies, simulator, calibration) import no torch, statically (every
import statement, lazy ones included) and at run time (importing all their modules).

``python tests/layout/test_layout_imports.py`` prints the graph.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository root is the `twinserve` package
PACKAGES = ("core", "policies", "simulator", "calibration", "engine", "server", "experiments", "bench")
NO_TORCH = ("core", "policies", "simulator", "calibration")
HEAVY = ("torch", "flashinfer")  # transformers alone (a tokenizer) pulls in no torch


def imported_names(source: str) -> set[str]:
    """The dotted module names every import statement of ``source`` names (relative ones skipped)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def package_imports(root: Path = ROOT) -> dict[str, dict[str, set[str]]]:
    """``{package: {imported top-level name: files}}``: twinserve packages by their folder name,
    other modules by their first component."""
    graph: dict[str, dict[str, set[str]]] = {p: {} for p in PACKAGES}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = str(path.relative_to(root))
            for name in imported_names(path.read_text()):
                parts = name.split(".")
                if parts[0] == "twinserve":
                    if len(parts) < 2 or parts[1] not in PACKAGES or parts[1] == pkg:
                        continue
                    target = parts[1]
                else:
                    target = parts[0]
                graph[pkg].setdefault(target, set()).add(rel)
    return graph


def package_edges(graph: dict[str, dict[str, set[str]]]) -> dict[str, set[str]]:
    return {p: {t for t in targets if t in PACKAGES} for p, targets in graph.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state and (c := visit(m)):
                return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(edges):
        if n not in state and (c := visit(n)):
            return c
    return None


def test_find_cycle_sees_a_cycle_and_its_absence():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_top_level_packages_import_each_other_without_cycles():
    edges = package_edges(package_imports())
    assert find_cycle(edges) is None
    assert not edges["core"], f"core imports {edges['core']}"
    assert "simulator" not in edges["engine"] and "engine" not in edges["simulator"]


@pytest.mark.parametrize("pkg", NO_TORCH)
def test_no_heavy_import_statement_in_the_light_packages(pkg):
    graph = package_imports()
    found = {h: sorted(graph[pkg][h]) for h in HEAVY if h in graph[pkg]}
    assert not found, f"{pkg}/ imports {found}"
    assert not package_edges(graph)[pkg] & {"engine", "server"}


def test_importing_every_light_module_leaves_torch_unloaded():
    mods = sorted("twinserve." + ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                  for pkg in NO_TORCH for p in (ROOT / pkg).rglob("*.py"))
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "print(sorted(h for h in " + repr(HEAVY) + " if h in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]", out


if __name__ == "__main__":
    g = package_imports()
    for p, targets in g.items():
        inner = sorted(t for t in targets if t in PACKAGES)
        heavy = sorted(t for t in targets if t in HEAVY)
        print(f"{p:12s} -> {', '.join(inner) or '-'}" + (f"   [{', '.join(heavy)}]" if heavy else ""))
    print("cycle:", find_cycle(package_edges(g)))
