"""Compose the experiment app's config without launching Hydra's job machinery."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from hydra import compose, initialize_config_dir

from twinserve.core.conf_path import CONFIG_NAME, conf_dir

SMALL = ["workload.num_requests=40", "print_summary=false", "progress=false"]


@pytest.fixture
def make_cfg() -> Callable[..., Any]:
    def make(*overrides: str) -> Any:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            return compose(config_name=CONFIG_NAME, overrides=[*SMALL, *overrides])

    return make
