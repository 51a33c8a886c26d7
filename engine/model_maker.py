"""`twinserve-make-model`: write an HF checkpoint the engine loads: random weights and a tokenizer
for a named shape, or a real model converted from a GGUF file.

    twinserve-make-model --shape tiny-llama --out /tmp/tiny [--seed 0] [--dtype float32]
    twinserve-make-model --from-gguf smollm2-135m --out /tmp/smollm2     # a preset, or a .gguf path

Writes config.json, generation_config.json, model.safetensors (or shards plus
model.safetensors.index.json), tokenizer.json, tokenizer_config.json. Random weights are
generated and written shard by shard, so memory holds at most one shard. Works offline.
``--from-gguf`` takes a GGUF file or a preset name (`engine.gguf_import.GGUF_PRESETS`) and
writes its weights, tokenizer and chat template (`engine.gguf_import.convert_gguf`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Iterator

import torch

from twinserve.core.errors import UserError
from twinserve.core.model_shapes import MODEL_SHAPES, ModelShape, get_shape
from twinserve.engine.model_config import parse_dtype
from twinserve.engine.tokenizer_maker import write_tokenizer


def weight_specs(shape: ModelShape) -> Iterator[tuple[str, tuple[int, ...]]]:
    """HF tensor names and shapes of a checkpoint of ``shape``, in file order."""
    h, q, kv, i = shape.hidden_size, shape.q_size, shape.kv_size, shape.intermediate_size
    yield "model.embed_tokens.weight", (shape.vocab_size, h)
    for n in range(shape.num_layers):
        p = f"model.layers.{n}"
        yield f"{p}.input_layernorm.weight", (h,)
        for name, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            yield f"{p}.self_attn.{name}.weight", (rows, h)
            if shape.qkv_bias:
                yield f"{p}.self_attn.{name}.bias", (rows,)
        if shape.qk_norm:
            yield f"{p}.self_attn.q_norm.weight", (shape.head_dim,)
            yield f"{p}.self_attn.k_norm.weight", (shape.head_dim,)
        yield f"{p}.self_attn.o_proj.weight", (h, q)
        yield f"{p}.post_attention_layernorm.weight", (h,)
        yield f"{p}.mlp.gate_proj.weight", (i, h)
        yield f"{p}.mlp.up_proj.weight", (i, h)
        yield f"{p}.mlp.down_proj.weight", (h, i)
    yield "model.norm.weight", (h,)
    if not shape.tie_word_embeddings:
        yield "lm_head.weight", (shape.vocab_size, h)


def _make_tensor(name: str, shp: tuple[int, ...], gen: torch.Generator, std: float,
                 dtype: torch.dtype) -> torch.Tensor:
    t = torch.randn(shp, generator=gen, dtype=torch.float32)
    if name.endswith("norm.weight"):
        t = 1.0 + 0.05 * t  # near one, but not exactly, so a misplaced norm weight shows up in tests
    else:
        t = t * std
    return t.to(dtype)


def write_weights(shape: ModelShape, out: Path, seed: int, dtype: torch.dtype, std: float,
                  max_shard_bytes: int) -> list[Path]:
    from safetensors.torch import save_file

    elem = torch.empty((), dtype=dtype).element_size()
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shp in weight_specs(shape):
        nbytes = elem * int(torch.Size(shp).numel())
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shp))
        size += nbytes
    gen = torch.Generator().manual_seed(seed)
    files: list[Path] = []
    weight_map: dict[str, str] = {}
    total = 0
    for k, items in enumerate(shards):
        fname = "model.safetensors" if len(shards) == 1 else f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {name: _make_tensor(name, shp, gen, std, dtype) for name, shp in items}
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        del tensors
        files.append(out / fname)
        weight_map.update({name: fname for name, _ in items})
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return files


def make_model(shape: str | ModelShape, out: str | Path, seed: int = 0, dtype: str = "bfloat16",
               std: float = 0.02, weights: bool = True, max_shard_bytes: int = 2 * 1024 ** 3) -> Path:
    """Write config, tokenizer and (unless ``weights=False``) random weights for a named (or
    given) shape; return ``out``."""
    shape = get_shape(shape) if isinstance(shape, str) else shape
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = shape.to_hf_config(dtype=dtype)
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2))
    gen_cfg = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "do_sample": False}
    (out_dir / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2))
    write_tokenizer(out_dir, shape.vocab_size, shape.max_position_embeddings)
    if weights:
        write_weights(shape, out_dir, seed, parse_dtype(dtype), std, max_shard_bytes)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="twinserve-make-model", description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--shape", choices=sorted(MODEL_SHAPES), help="random weights of a named shape")
    src.add_argument("--from-gguf", metavar="FILE|PRESET",
                     help="convert a GGUF file, or the one a preset's package ships (e.g. smollm2-135m)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--std", type=float, default=0.02, help="std of the random matrices")
    ap.add_argument("--no-weights", action="store_true",
                    help="config and tokenizer only (serve with load_format=dummy)")
    args = ap.parse_args(argv)
    try:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        ap.exit(2, f"twinserve-make-model: cannot create --out {args.out}: {e.strerror}\n")
    if args.from_gguf:
        from twinserve.engine.gguf_import import convert_gguf

        try:
            out = convert_gguf(args.from_gguf, args.out, args.dtype)
        except (UserError, FileNotFoundError, ImportError) as e:
            ap.exit(2, f"twinserve-make-model: {e}\n")
        print(f"wrote {args.from_gguf} to {out}")
        return
    out = make_model(args.shape, args.out, args.seed, args.dtype, args.std, weights=not args.no_weights)
    print(f"wrote {args.shape} to {out}")


if __name__ == "__main__":
    main()
