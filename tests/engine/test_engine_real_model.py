"""A real model (SmolLM2-135M-Instruct from its GGUF): the converted checkpoint, and the
engine's greedy output against transformers on the same weights, on the CPU."""

from __future__ import annotations

import json

import pytest

QUESTIONS = ["What is the capital of France?", "Name three primary colors.",
             "Repeat this code exactly:\n```python\ndef add(a, b):\n    return a + b\n```"]
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def hf_tok(real_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(real_model_dir)


def _chat_ids(tok, text: str) -> list[int]:
    ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def test_checkpoint_is_smollm2_with_chat_template(real_model_dir, hf_tok):
    from safetensors import safe_open

    from twinserve.engine.model_config import ModelConfig
    from twinserve.server.tokenization import TextTokenizer

    mc = ModelConfig.from_dir(real_model_dir)
    assert (mc.architecture, mc.num_layers, mc.hidden_size, mc.num_heads, mc.num_kv_heads, mc.head_dim) == \
        ("LlamaForCausalLM", 30, 576, 9, 3, 64)
    assert mc.tie_word_embeddings and mc.vocab_size == 49152 and mc.eos_token_ids
    with safe_open(str(real_model_dir / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    assert len([n for n in names if n.endswith("q_proj.weight")]) == 30
    assert json.loads((real_model_dir / "config.json").read_text())["torch_dtype"] == "bfloat16"
    # the server's own tokenizer (tokenizers + jinja2) renders the chat exactly as transformers does
    tt = TextTokenizer(str(real_model_dir))
    msgs = [{"role": "user", "content": QUESTIONS[0]}]
    text = tt.render_chat(msgs)
    assert "What is the capital of France?" in text
    assert tt.encode(text, add_special=False) == _chat_ids(hf_tok, QUESTIONS[0])


def test_engine_greedy_equals_transformers(real_model_dir, hf_tok, hf_model):
    import torch

    from twinserve.core.sampling import SamplingParams
    from twinserve.engine.llm import LLM

    prompts = [_chat_ids(hf_tok, q) for q in QUESTIONS]
    ref = hf_model(real_model_dir, torch.float32)
    want = []
    with torch.no_grad():
        for p in prompts:
            out = ref.generate(torch.tensor([p]), max_new_tokens=NEW_TOKENS, do_sample=False,
                               attention_mask=torch.ones(1, len(p), dtype=torch.long))
            want.append(out[0, len(p):].tolist())
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    # page size 16 with prompts of ~40 tokens: every request spans pages; all three share steps
    with LLM(str(real_model_dir), device="cpu", dtype="float32", cpu_kv_tokens=2048) as llm:
        got = [o.token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    assert got == want
    answer = hf_tok.decode(got[0], skip_special_tokens=True)
    assert "Paris" in answer, answer


def test_make_model_names_the_missing_gguf(tmp_path, capsys):
    from twinserve.engine.model_maker import main

    with pytest.raises(SystemExit) as e:
        main(["--from-gguf", str(tmp_path / "nope.gguf"), "--out", str(tmp_path / "out")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "neither a GGUF file nor a preset" in err and "smollm2-135m" in err


def test_make_model_refuses_a_file_that_is_not_gguf_and_an_out_it_cannot_create(tmp_path, capsys):
    from twinserve.engine.model_maker import main

    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    with pytest.raises(SystemExit) as e:
        main(["--from-gguf", str(text), "--out", str(tmp_path / "out")])
    assert e.value.code == 2 and f"{text} is not a GGUF file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--shape", "tiny-llama", "--out", str(text / "sub")])  # a file where a folder must go
    assert e.value.code == 2 and f"cannot create --out {text / 'sub'}" in capsys.readouterr().err
