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


def test_the_conf_tree_is_package_data_where_conf_dir_finds_it():
    from fnmatch import fnmatch

    from twinserve.core.conf_path import CONFIG_NAME, conf_dir

    conf = conf_dir()
    assert conf == ROOT / "conf" and (conf / f"{CONFIG_NAME}.yaml").is_file()
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["twinserve"]
    yamls = [str(p.relative_to(ROOT)) for p in conf.rglob("*.yaml")]
    assert len(yamls) > 30
    # setuptools' `**` spans folders; fnmatch's `*` already does, so `conf/**/*.yaml` reads as `conf/*/*.yaml`
    assert [y for y in yamls if not any(fnmatch(y, g.replace("**/", "*")) for g in globs)] == []
    assert not (ROOT / "experiments" / "conf").exists()
