"""Real-text workloads: standard-library code-edit prompts and short questions, tokenized by
the real model's tokenizer through its chat template."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from twinserve.core.workload import WORKLOADS, text


def test_stdlib_functions_are_exact_sources():
    fns = text.stdlib_functions()
    assert len(fns) >= 30
    assert len({f.module for f in fns}) >= 8
    for f in fns:
        tree = ast.parse(f.source)
        assert isinstance(tree.body[0], ast.FunctionDef) and tree.body[0].name == f.name
        assert 6 <= f.source.count("\n") + 1 <= 30


def test_code_edit_texts_are_seeded_and_quote_the_function():
    a, b, c = text.code_edit_texts(20, seed=1), text.code_edit_texts(20, seed=1), text.code_edit_texts(20, seed=2)
    assert [p for p, _ in a] == [p for p, _ in b] != [p for p, _ in c]
    for prompt, fn in a:
        assert fn.source in prompt and fn.module in prompt
    assert len({fn.name for _, fn in a}) > 5


def test_code_edit_texts_come_from_the_given_sources(tmp_path):
    """``stdlib_dir`` (``workload.stdlib_dir``): another interpreter's sources, copied here,
    give that interpreter's prompts; a module missing there is left out."""
    (tmp_path / "textwrap.py").write_text(
        "def shout(word, times=2):\n" + "".join(f"    step{i} = {i}\n" for i in range(5)) + "    return word * times\n")
    pairs = text.code_edit_texts(6, seed=1, stdlib_dir=str(tmp_path))
    assert {fn.name for _, fn in pairs} == {"shout"} and all(fn.param == "word" for _, fn in pairs)
    assert [p for p, _ in pairs] == [p for p, _ in text.code_edit_texts(6, seed=1, stdlib_dir=str(tmp_path))]
    assert [p for p, _ in pairs] != [p for p, _ in text.code_edit_texts(6, seed=1)]


def test_workloads_need_a_tokenizer():
    with pytest.raises(ValueError, match="tokenizer=DIR"):
        WORKLOADS.create("code_edit", num_requests=2)


def test_code_edit_workload_real_tokens(real_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(real_model_dir)
    w = WORKLOADS.create("code_edit", tokenizer=str(real_model_dir), num_requests=12, rate=4.0, seed=3)
    assert len(w) == 12 and np.all(np.diff(w.arrivals) >= 0) and w.arrivals[0] == 0
    pairs = text.code_edit_texts(12, seed=3)
    for spec, (prompt, fn) in zip(w, pairs):
        ids = w.prompt_tokens(spec)
        assert ids.size == spec.prompt_len and int(ids.max()) < len(tok)
        decoded = tok.decode(ids.tolist())
        assert fn.source in decoded and decoded.rstrip().endswith("assistant")
        assert spec.output_len == min(1024, len(tok(fn.source, add_special_tokens=False)["input_ids"]) + 16)
    # same seed, same workload; the rate only moves arrivals
    w2 = WORKLOADS.create("code_edit", tokenizer=str(real_model_dir), num_requests=12, rate=8.0, seed=3)
    assert [s.prompt_len for s in w2] == [s.prompt_len for s in w]
    assert w2.arrivals[-1] < w.arrivals[-1]


def test_questions_workload_real_tokens(real_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(real_model_dir)
    w = WORKLOADS.create("questions", tokenizer=str(real_model_dir), num_requests=8, rate=2.0, output_len=32)
    qs = text.question_texts(8, seed=0)
    for spec, q in zip(w, qs):
        assert q in tok.decode(w.prompt_tokens(spec).tolist())
        assert spec.output_len == 32
    assert max(s.prompt_len for s in w) < 80  # short prompts: little for prompt lookup to find
