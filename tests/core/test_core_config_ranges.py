"""The numeric keys of a run config have ranges (`core.config_checks.RANGED_KEYS`): a value out
of range is one `UserError` naming the key, the value and what is allowed; null, in-range
values and every shipped conf option pass; and the config records' own checks are user errors
too."""

from __future__ import annotations

import math
from typing import Any

import pytest
from omegaconf import OmegaConf

from twinserve.core.conf_compose import compose
from twinserve.core.conf_path import conf_dir
from twinserve.core.config import SchedulerConfig
from twinserve.core.config_checks import RANGED_KEYS, RangedKey, check_ranges, lookup
from twinserve.core.errors import UserError
from twinserve.core.model_shapes import get_shape
from twinserve.core.spec import SpecConfig
from twinserve.simulator.hardware import get_hardware
from twinserve.simulator.kv_plan import kv_pages

WORKLOADS = sorted(p.stem for p in (conf_dir() / "workload").glob("*.yaml") if not p.stem.startswith("_"))


def nested(key: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``a.b``."""
    out: dict[str, Any] = value
    for part in reversed(key.split(".")):
        out = {part: out}
    return out


def bad_values(rk: RangedKey) -> list[Any]:
    below = rk.low if rk.low_open else rk.low - 1
    return [below, "fast", True] + ([rk.high + 1] if math.isfinite(rk.high) else [])


CASES = [(rk, v) for rk in RANGED_KEYS for v in bad_values(rk)]


@pytest.mark.parametrize("rk, value", CASES, ids=[f"{rk.key}={v}" for rk, v in CASES])
def test_a_value_out_of_range_names_the_key_and_what_is_allowed(rk: RangedKey, value: Any) -> None:
    with pytest.raises(UserError) as e:
        check_ranges(nested(rk.key, value))
    assert e.value.key == rk.key
    assert str(e.value).startswith(f"{rk.key}={value}: allowed: a number ")


@pytest.mark.parametrize("rk", RANGED_KEYS, ids=[rk.key for rk in RANGED_KEYS])
def test_null_and_in_range_values_pass(rk: RangedKey) -> None:
    check_ranges(nested(rk.key, None))
    edge = rk.low + 1 if rk.low_open else rk.low
    check_ranges(nested(rk.key, min(edge, rk.high)))
    check_ranges(nested(rk.key, str(min(edge, rk.high))))  # a number given as text
    if not math.isfinite(rk.high):
        check_ranges(nested(rk.key, math.inf))


def test_every_ranged_key_is_a_key_of_the_conf_tree() -> None:
    """A typo in the table would check nothing: each key is in the default config or in one of
    the workload options."""
    trees = [OmegaConf.to_container(compose([f"workload={w}"])) for w in WORKLOADS]
    for rk in RANGED_KEYS:
        head, _, leaf = rk.key.rpartition(".")
        assert any(leaf in (lookup(t, head) if head else t) for t in trees), rk.key


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_shipped_workload_option_is_in_range(workload: str) -> None:
    check_ranges(OmegaConf.to_container(compose([f"workload={workload}"])))


def test_scheduler_and_spec_records_refuse_as_user_errors() -> None:
    with pytest.raises(UserError, match=r"SchedulerConfig.max_running=0: allowed: >= 1"):
        SchedulerConfig(max_running=0).validate()
    with pytest.raises(UserError, match="unknown spec.method 'bogus'") as e:
        SpecConfig.of({"method": "bogus", "num_tokens": 2})
    assert e.value.key == "spec.method"
    with pytest.raises(UserError, match="spec.num_tokens must be >= 1") as e:
        SpecConfig.of({"method": "ngram", "num_tokens": 0})
    assert e.value.key == "spec.num_tokens"


def test_a_model_too_large_for_the_device_says_what_to_change() -> None:
    with pytest.raises(UserError, match=r"leaves no KV memory on h100 .*raise tp, kv.mem_fraction"):
        kv_pages(get_shape("llama3-70b"), get_hardware("h100"))
    assert kv_pages(get_shape("llama3-70b"), get_hardware("h100"), tp=4) > 0
