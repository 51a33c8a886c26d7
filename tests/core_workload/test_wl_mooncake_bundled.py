"""The bundled Mooncake traces load from the package; .jsonl.gz reads; max_prompt_tokens counts."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from twinserve.core.workload import build, bundled_path, load_mooncake


@pytest.mark.parametrize("name, count, longest", [("mooncake_conv", 12031, 126195),
                                                  ("mooncake_synthetic", 3993, 191378)])
def test_bundled_traces_load_with_512_token_blocks(name: str, count: int, longest: int) -> None:
    assert bundled_path(name).is_file()
    w = build(name)
    assert len(w) == count and w.block_size == 512 and w.name == name
    assert int(w.prompt_lens.max()) == longest and w.arrivals[0] == 0.0
    assert all(s.hash_ids for s in w)
    # 512-token blocks: hash_ids cover the prompt to within one block
    blocks = np.array([len(s.hash_ids) for s in w])
    assert np.all(np.abs(blocks * 512 - w.prompt_lens) <= 512)


def test_gzipped_jsonl_reads_like_the_plain_file(tmp_path) -> None:
    rows = [{"timestamp": 1000 * i, "input_length": 10 + i, "output_length": 3, "hash_ids": [1, 2, 3 + i]}
            for i in range(4)]
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    (tmp_path / "t.jsonl").write_text(text)
    with gzip.open(tmp_path / "t.jsonl.gz", "wt") as f:
        f.write(text)
    a, b = load_mooncake(tmp_path / "t.jsonl", block_size=4), load_mooncake(tmp_path / "t.jsonl.gz", block_size=4)
    assert [(s.arrival, s.prompt_len, s.hash_ids) for s in a] == [(s.arrival, s.prompt_len, s.hash_ids) for s in b]
    assert b.name == "t.jsonl"


def test_max_prompt_tokens_drops_and_counts_the_longer_prompts_of_the_slice() -> None:
    sliced = build("mooncake_conv", duration_s=120)
    w = build("mooncake_conv", duration_s=120, max_prompt_tokens=8192)
    longer = [s.rid for s in sliced if s.prompt_len > 8192]
    assert longer and len(w) == len(sliced) - len(longer)
    assert int(w.prompt_lens.max()) <= 8192
    d = w.filters["max_prompt_tokens"]
    assert (d.limit, d.dropped, d.kept) == (8192, len(longer), len(w))
    assert list(d.first_ids) == longer[:10]
    kept = {s.rid: s.arrival for s in w}
    assert all(kept[s.rid] == s.arrival for s in sliced if s.rid in kept)   # arrivals unchanged
    assert w.with_vocab(1000).filters == w.filters                           # carried along
    assert not build("mooncake_conv", duration_s=120).filters
