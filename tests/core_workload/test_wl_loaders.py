"""Trace loaders on small temp files and on the bundled Azure traces."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from twinserve.core.workload import (load_azure, load_csv, load_mooncake, load_sharegpt,
                                     bundled_path)


def test_csv_bundled_layout_rebases_and_keeps_rows(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                 "10.0,100,5\n10.5,7,300\n12.25,4000,1\n")
    w = load_azure(p)
    assert len(w) == 3
    assert w.arrivals.tolist() == [0.0, 0.5, 2.25]
    assert w.prompt_lens.tolist() == [100, 7, 4000]
    assert w.output_lens.tolist() == [5, 300, 1]
    assert [s.rid for s in w] == [0, 1, 2]


def test_azure_published_layout_with_timestamps(tmp_path):
    p = tmp_path / "raw.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:50.9951690,396,109\n")
    w = load_azure(p)
    assert w.prompt_lens.tolist() == [374, 396]
    assert w.arrivals[0] == 0.0
    assert w.arrivals[1] == pytest.approx(4.314579, abs=1e-6)


def test_csv_custom_columns_and_time_unit(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("t_ms,inp,out\n1000,3,4\n3500,5,6\n")
    w = load_csv(p, arrival_col="t_ms", prompt_col="inp", output_col="out", time_unit=1e-3)
    assert w.arrivals.tolist() == [0.0, 2.5]
    assert w.prompt_lens.tolist() == [3, 5]


def test_invalid_rows_raise_or_drop_with_warning(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,0\n1,10,3\n2,,3\n")
    with pytest.raises(ValueError, match="2 rows"):
        load_azure(p)
    with pytest.warns(UserWarning, match="2 rows"):
        w = load_azure(p, invalid="drop")
    assert [s.rid for s in w] == [1] and w.output_lens.tolist() == [3]


def test_mooncake_jsonl_hash_blocks_are_shared(tmp_path):
    p = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 2000, "input_length": 10, "output_length": 3, "hash_ids": [7, 8, 9]},
        {"timestamp": 2500, "input_length": 9, "output_length": 2, "hash_ids": [7, 8, 11]},
        {"timestamp": 4000, "input_length": 6, "output_length": 1, "hash_ids": [5, 7]},
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    w = load_mooncake(p, block_size=4)
    assert w.arrivals.tolist() == [0.0, 0.5, 2.0]
    assert w.block_size == 4 and w[0].hash_ids == (7, 8, 9)
    a, b, c = (w.prompt_tokens(s) for s in w)
    assert a.size == 10 and b.size == 9 and c.size == 6
    assert np.array_equal(a[:8], b[:8])            # blocks 7, 8 shared
    assert a[8] != b[8]                            # blocks 9 and 11 differ
    assert np.array_equal(c[4:6], a[:2])           # hash 7 as second block: same tokens
    assert not np.array_equal(c[:4], a[:4])        # hash 5 differs from 7


def test_sharegpt_first_human_turn_and_first_answer(tmp_path):
    data = [
        {"conversations": [{"from": "human", "value": "hi there"},
                           {"from": "gpt", "value": "hello!"},
                           {"from": "human", "value": "more"}, {"from": "gpt", "value": "x"}]},
        {"conversations": [{"from": "human", "value": "no answer"}]},
        {"conversations": [{"from": "gpt", "value": "orphan"},
                           {"from": "human", "value": "héllo"}, {"from": "gpt", "value": "ok"}]},
    ]
    p = tmp_path / "s.json"
    p.write_text(json.dumps(data))
    w = load_sharegpt(p, rate=2.0, seed=3)
    assert len(w) == 2
    assert w.prompt_tokens(w[0]).tolist() == list(b"hi there")
    assert w.output_tokens(w[0]).tolist() == list(b"hello!")
    assert w[1].prompt_len == len("héllo".encode()) and w[1].output_len == 2
    assert w.arrivals[0] == 0.0 and w.arrivals[1] > 0.0
    w2 = load_sharegpt(p, rate=2.0, seed=3)
    assert w2.arrivals.tolist() == w.arrivals.tolist()
    words = load_sharegpt(p, tokenize=lambda s: [len(x) for x in s.split()], num_requests=1)
    assert len(words) == 1 and words.prompt_tokens(words[0]).tolist() == [2, 5]


def test_bundled_traces_counts_and_span():
    conv = load_azure("azure_conv")
    assert len(conv) == 19366
    st = conv.stats()
    assert 57 * 60 < st["span_s"] < 59 * 60
    assert st["prompt_p50"] == 1020 and st["output_p50"] == 129
    assert round(st["prompt_mean"]) == 1155
    code = load_azure("azure_code")
    assert len(code) == 8819
    assert 56 * 60 < code.stats()["span_s"] < 58 * 60
    assert bundled_path("azure_code").name == "azure2023_code.csv"


def test_full_azure_conv_load_is_fast():
    t = time.perf_counter()
    w = load_azure("azure_conv")
    elapsed = time.perf_counter() - t
    assert len(w) == 19366
    assert elapsed < 2.0, f"loading the Azure conv trace took {elapsed:.2f} s"
