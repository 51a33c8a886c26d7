"""Shared fixtures of the engine tests: tiny random checkpoints and transformers references."""

from __future__ import annotations

from pathlib import Path

import pytest

# std 0.1 (not the maker's 0.02 default) so that greedy outputs vary instead of repeating one id
STD = 0.1


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """``tiny_model_dir(shape name or ModelShape, dtype="float32") -> Path``, each made once."""
    from twinserve.engine.model_maker import make_model

    made: dict[tuple[str, str], Path] = {}

    def get(shape, dtype: str = "float32") -> Path:
        key = (shape, dtype)
        if key not in made:
            name = shape if isinstance(shape, str) else shape.name
            out = tmp_path_factory.mktemp(f"{name}-{dtype}")
            made[key] = make_model(shape, out, seed=0, dtype=dtype, std=STD)
        return made[key]

    return get


@pytest.fixture(scope="session")
def hf_model():
    """``hf_model(path, dtype, device) -> transformers model`` (cached), EOS stopping disabled."""
    import torch
    from transformers import AutoModelForCausalLM

    cache: dict = {}

    def get(path: Path, dtype=None, device: str = "cpu"):
        dtype = dtype or torch.float32
        key = (str(path), dtype, device)
        if key not in cache:
            m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
            m.generation_config.eos_token_id = None
            cache[key] = m
        return cache[key]

    return get


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core CI machine OpenMP
    spinning makes them 10x slower; restore the setting afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
