"""Where the Hydra conf tree lives: ``conf/`` at the root of the `twinserve` package.

Both console scripts (``twinserve-run`` and ``twinserve-serve``) compose from this one folder.
It is package data, not a Python package (no ``__init__.py``), so it is found by its path,
which holds for a checkout, an editable install and a wheel alike.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_NAME = "config"


def conf_dir() -> Path:
    """The absolute path of the conf tree (``<twinserve>/conf``)."""
    return Path(__file__).resolve().parents[1] / "conf"
