"""The model maker writes a loadable HF checkpoint and an exact-size tokenizer, offline."""

from __future__ import annotations

import json

import pytest

from twinserve.core.model_shapes import get_shape
from twinserve.engine.model_maker import main, make_model, weight_specs


def test_checkpoint_files_and_config(tiny_model_dir):
    d = tiny_model_dir("tiny-qwen3")
    cfg = json.loads((d / "config.json").read_text())
    assert cfg == get_shape("tiny-qwen3").to_hf_config(dtype="float32")
    gen = json.loads((d / "generation_config.json").read_text())
    assert gen["eos_token_id"] == 2 and gen["bos_token_id"] == 1
    assert (d / "model.safetensors").exists()


def test_tokenizer_exact_vocab_specials_and_chat_template(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir("tiny-llama"))
    assert len(tok) == get_shape("tiny-llama").vocab_size
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    text = "Hello world, the engine speaks! 123"
    ids = tok(text)["input_ids"]
    assert ids[0] == 1 and max(ids) < 1024
    assert tok.decode(ids, skip_special_tokens=True) == text
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                   tokenize=False)
    assert chat.startswith("<s><|user|>\nhi</s>") and chat.endswith("<|assistant|>\n")


def test_large_vocab_tokenizer_is_exact(tmp_path):
    from tokenizers import Tokenizer

    from twinserve.engine.tokenizer_maker import write_tokenizer

    write_tokenizer(tmp_path, 151936, 4096)
    assert Tokenizer.from_file(str(tmp_path / "tokenizer.json")).get_vocab_size() == 151936


def test_sharded_checkpoint_loads_in_engine(tmp_path):
    from safetensors import safe_open

    from twinserve.engine.engine import Engine, EngineConfig

    d = make_model("tiny-qwen2", tmp_path, dtype="float32", max_shard_bytes=1 << 20)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1
    names = set()
    for f in files:
        with safe_open(str(d / f), "pt") as h:
            names |= set(h.keys())
    assert names == {n for n, _ in weight_specs(get_shape("tiny-qwen2"))} == set(index["weight_map"])
    eng = Engine(EngineConfig(model=str(d), device="cpu", cpu_kv_tokens=256))
    assert eng.model.model.layers[1].self_attn.qkv_proj.bias is not None


def test_cli_no_weights(tmp_path, capsys):
    main(["--shape", "tiny-mistral", "--out", str(tmp_path), "--no-weights"])
    assert (tmp_path / "config.json").exists() and not list(tmp_path.glob("*.safetensors"))
    with pytest.raises(SystemExit):
        main(["--shape", "no-such-shape", "--out", str(tmp_path)])
