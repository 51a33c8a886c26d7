"""Fixtures of the tensor-parallel tests: tiny random checkpoints, one torch thread."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

STD = 0.1  # as tests/engine: greedy outputs vary instead of repeating one id


def kv1_shape():
    """tiny-llama with ONE kv head (replicated on both ranks at tp=2) and an odd vocabulary of
    1001 ids (padded to 1002 for the vocab-parallel embedding and LM head)."""
    from twinserve.core.model_shapes import get_shape

    return replace(get_shape("tiny-llama"), name="tiny-llama-kv1", num_kv_heads=1, vocab_size=1001)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory):
    """``tiny_dir(shape name, dtype="float32") -> Path``, each made once; "tiny-llama-kv1" is
    `kv1_shape`."""
    from twinserve.engine.model_maker import make_model

    made: dict[tuple[str, str], Path] = {}

    def get(name: str, dtype: str = "float32") -> Path:
        if (name, dtype) not in made:
            shape = kv1_shape() if name == "tiny-llama-kv1" else name
            out = tmp_path_factory.mktemp(f"{name}-{dtype}")
            made[(name, dtype)] = make_model(shape, out, seed=0, dtype=dtype, std=STD)
        return made[(name, dtype)]

    return get


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """One intra-op thread here and (inherited through the TP leader) in every follower rank."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
