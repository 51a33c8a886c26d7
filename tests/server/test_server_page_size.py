"""The server's page size (the routers' prefix-index granularity, the tokenizer worker's
default, the fallback for an engine that reports none) is `SchedulerConfig`'s one default:
no server module writes a number for it."""

from __future__ import annotations

import ast
from pathlib import Path

from twinserve.core.config import SchedulerConfig

SERVER = Path(__file__).resolve().parents[2] / "server"


def _named_page_size(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and "page_size" in node.id.lower() or \
        isinstance(node, ast.Attribute) and "page_size" in node.attr.lower()


def page_size_literals(source: str) -> list[int]:
    """Line numbers where a page-size name is given a number, or ``.get("page_size", N)``
    falls back to one."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_named_page_size(t) for t in targets) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, int):
                out.append(node.lineno)
        elif isinstance(node, ast.Call) and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) \
                and node.args[0].value == "page_size" and isinstance(node.args[1], ast.Constant):
            out.append(node.lineno)
    return out


def test_the_check_sees_a_written_page_size() -> None:
    assert page_size_literals("PAGE_SIZE = 16\nclass C:\n    page_size: int = 16\nx = d.get('page_size', 16)\n") \
        == [1, 3, 4]
    assert page_size_literals("page_size: int = scheduler_default('page_size')\n") == []


def test_no_server_module_writes_the_page_size() -> None:
    found = {p.name: lines for p in sorted(SERVER.glob("*.py")) if (lines := page_size_literals(p.read_text()))}
    assert found == {}


def test_the_servers_page_sizes_are_the_schedulers_default() -> None:
    from twinserve.server.replica_router import DEFAULT_PAGE_SIZE
    from twinserve.server.tokenizer_worker import TokenizerWorkerConfig
    from twinserve.server.url_router import URL_PAGE_SIZE

    assert DEFAULT_PAGE_SIZE == URL_PAGE_SIZE == TokenizerWorkerConfig("t", 8, 8).page_size == SchedulerConfig().page_size
