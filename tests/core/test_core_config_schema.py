"""The conf tree composes against its schema (`core.conf_schema`): every option of every group
composes, each backend option extends its own schema, and a composition error becomes one
`UserError` line naming the key."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from twinserve.core.conf_compose import compose, each_value
from twinserve.core.conf_path import conf_dir
from twinserve.core.conf_schema import SCHEMAS, EngineBackendNode, RunConfig, ServerBackendNode, SimBackendNode
from twinserve.core.errors import UserError
from twinserve.core.spec import SpecConfig

OPTIONS = [(g.name, o.stem) for g in sorted(conf_dir().iterdir()) if g.is_dir() and g.name != "hydra"
           for o in sorted(g.glob("*.yaml")) if not o.stem.startswith("_")]


@pytest.mark.parametrize("group, option", OPTIONS)
def test_every_option_composes_against_the_schema(group: str, option: str) -> None:
    cfg = compose([f"{group}={option}"])
    assert OmegaConf.get_type(cfg) is RunConfig


@pytest.mark.parametrize("option, schema", [("sim", SimBackendNode), ("engine", EngineBackendNode),
                                            ("server", ServerBackendNode)])
def test_each_backend_option_is_typed_by_its_schema(option: str, schema: type) -> None:
    cfg = compose([f"backend={option}"])
    assert OmegaConf.get_type(cfg.backend) is schema
    assert (None, "base_config", RunConfig) in SCHEMAS and ("backend", f"base_{option}", schema) in SCHEMAS


@pytest.mark.parametrize("override, key, says", [
    ("kv.num_page=4", "kv.num_page", "Key 'num_page' not in 'KvNode'"),
    ("backend.noise=loud", "backend.noise", "'loud' is not a valid bool"),
    ("replicas=some", "replicas", "could not be converted to Integer"),
    ("server.port=x", "server.port", "could not be converted to Integer"),
])
def test_a_composition_error_is_one_user_error_line_naming_the_key(override: str, key: str, says: str) -> None:
    with pytest.raises(UserError) as e:
        compose([override])
    assert e.value.key == key and says in str(e.value) and "\n" not in str(e.value)
    assert "+" + key not in str(e.value)  # no hint to add a mistyped key


def test_each_value_gives_every_value_of_every_sweep_once() -> None:
    got = each_value(["a=1,2", "b=x", "c=p,q"])
    assert got == [["a=1", "b=x", "c=p"], ["a=2", "b=x", "c=p"], ["a=1", "b=x", "c=q"]]


def test_the_yaml_gives_every_value_the_schema_leaves_missing() -> None:
    assert OmegaConf.missing_keys(compose([])) == set()


def test_the_spec_keys_the_tree_leaves_out_take_spec_configs_defaults() -> None:
    node = OmegaConf.to_container(compose(["spec.ngram_min=2"]).spec)
    assert node["ngram_max"] is None
    spec = SpecConfig.of(node)
    assert (spec.ngram_min, spec.ngram_max) == (2, SpecConfig().ngram_max)


@pytest.mark.parametrize("value, stored", [("auto", -1), ("8", 8), ("0", 0)])
def test_spec_max_batch_size_takes_a_size_or_auto(value: str, stored: int) -> None:
    node = OmegaConf.to_container(compose(["spec.method=ngram", "spec.num_tokens=4", f"spec.max_batch_size={value}"]).spec)
    assert SpecConfig.of(node).max_batch_size == stored
