"""Every package folder of the tree is listed in pyproject.toml, so a non-editable install has it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"twinserve"}
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if not rel.parts or rel.parts[0].startswith(".") or rel.parts[0] in ("tests", "build") \
                or rel.parts[0].endswith(".egg-info"):
            continue
        found.add(".".join(("twinserve", *rel.parts)))
    assert sorted(found - listed) == []
