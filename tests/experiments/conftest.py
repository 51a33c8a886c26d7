"""Compose the experiment app's config without launching Hydra's job machinery."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from twinserve.core.conf_compose import compose

SMALL = ["workload.num_requests=40", "print_summary=false", "progress=false"]


@pytest.fixture
def make_cfg() -> Callable[..., Any]:
    def make(*overrides: str) -> Any:
        return compose([*SMALL, *overrides])

    return make
