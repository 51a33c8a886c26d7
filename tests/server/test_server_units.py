"""Process-free units of the server: message codec, detokenizer stop logic, tokenizer checks."""

from __future__ import annotations

import dataclasses

import pytest

from twinserve.core.errors import UserError
from twinserve.server.detokenizer_worker import Detokenizer, find_stop, held_suffix
from twinserve.server.messages import (
    Accepted, GenerateRequest, StepOutputs, TextDelta, TokenizeRequest, TokenOutput, decode, encode,
    message_types,
)
from twinserve.server.tokenization import TextTokenizer
from twinserve.server.tokenizer_worker import RequestError, TokenizerWorkerConfig, tokenize


def _example(cls: type) -> object:
    values = {}
    for f in dataclasses.fields(cls):
        t = str(f.type)
        if "list[GenerateRequest]" in t:
            values[f.name] = [GenerateRequest(3, [1, 2], {"seed": None}, {}, 0.5)]
        elif "list[TextDelta]" in t:
            values[f.name] = [TextDelta(3, "x", [1], True, "stop", 4, 1)]
        elif "list[list[int]]" in t:
            values[f.name] = [[1, 2], []]
        elif t.startswith("int") or t == "int":
            values[f.name] = 7
        elif t.startswith("float"):
            values[f.name] = 1.5
        elif t.startswith("bool"):
            values[f.name] = True
        elif t.startswith("str"):
            values[f.name] = "x"
        elif t.startswith("dict"):
            values[f.name] = {"a": [1, "b"], "n": None}
        elif t.startswith("list"):
            values[f.name] = [1, 2, 3]
        else:
            values[f.name] = None
    return cls(**values)


@pytest.mark.parametrize("cls", message_types(), ids=lambda c: c.__name__)
def test_every_message_round_trips(cls: type) -> None:
    msg = _example(cls)
    assert decode(encode(msg)) == msg


def test_decode_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        decode(b"\xc1\xc1")
    with pytest.raises(ValueError):
        decode(b"\x93\x01\x02\x03")  # a plain msgpack list, not a message
    with pytest.raises(ValueError):
        decode(encode(Accepted(1, 2, {}))[:-3])  # truncated


def test_stop_helpers() -> None:
    assert find_stop("hello world", ["wor", "lo"]) == 3
    assert find_stop("hello", ["xyz"]) == -1
    assert held_suffix("abcSTO", ["STOP"]) == 3
    assert held_suffix("abcS", ["STOP", "SX"]) == 1
    assert held_suffix("abc", ["STOP"]) == 0


@pytest.fixture(scope="module")
def tok(tiny_model: str) -> TextTokenizer:
    return TextTokenizer(tiny_model)


def test_detokenizer_stop_string_across_tokens(tok: TextTokenizer) -> None:
    ids = tok.encode("one two STOP three", add_special=False)
    d = Detokenizer(tok)
    d.accept(Accepted(1, 3, {"stop": ["STOP"], "detokenize": True, "prompt_tail": [1]}))
    text, finished, aborts = "", False, []
    for i, t in enumerate(ids):  # one token per step, as the engine sends them
        deltas, ab = d.outputs(StepOutputs.of([TokenOutput(1, [t], False, None, 3, 0)], 0.0))
        aborts += ab
        for x in deltas:
            text += x.text
            finished = finished or x.finished
            if x.finished:
                assert x.finish_reason == "stop"
        if finished:
            break
    assert finished and text == "one two " and aborts == [1]
    assert 1 not in d.live
    # later outputs of the stopped request are dropped
    assert d.outputs(StepOutputs.of([TokenOutput(1, [5], False, None, 3, 0)], 0.0)) == ([], [])


def test_detokenizer_flushes_held_text_at_the_end(tok: TextTokenizer) -> None:
    ids = tok.encode("abc ST", add_special=False)
    d = Detokenizer(tok)
    d.accept(Accepted(2, 3, {"stop": ["STOP"], "detokenize": True}))
    deltas, _ = d.outputs(StepOutputs.of([TokenOutput(2, ids[:-1], False, None, 3, 0)], 0.0))
    held = "".join(x.text for x in deltas)
    deltas, _ = d.outputs(StepOutputs.of([TokenOutput(2, ids[-1:], True, "length", 3, 0)], 0.0))
    assert held + "".join(x.text for x in deltas) == "abc ST"


def test_detokenizer_hides_a_stop_token(tok: TextTokenizer) -> None:
    ids = tok.encode("hi!", add_special=False)
    d = Detokenizer(tok)
    d.accept(Accepted(3, 3, {"stop": [], "stop_token_ids": [ids[-1]], "detokenize": True}))
    deltas, _ = d.outputs(StepOutputs.of([TokenOutput(3, ids, True, "stop", 3, 0)], 0.0))
    assert deltas[0].text == tok.decode(ids[:-1]) and deltas[0].token_ids == ids


def _treq(**kw) -> TokenizeRequest:
    base = dict(rid=1, kind="text", text="hello", messages=None, token_ids=None, params={},
                max_tokens=None, default_max_tokens=16, detok={}, arrival=0.0)
    base.update(kw)
    return TokenizeRequest(**base)


def test_tokenizer_checks(tok: TextTokenizer) -> None:
    cfg = TokenizerWorkerConfig("", max_model_len=32, vocab_size=1024)
    g = tokenize(tok, cfg, _treq())
    assert g.prompt_ids[0] == 1 and g.params["max_tokens"] == 16  # BOS added, default applied
    g = tokenize(tok, cfg, _treq(kind="ids", token_ids=[5] * 30, default_max_tokens=16))
    assert g.params["max_tokens"] == 2  # the default is clipped to the room left
    chat = tokenize(tok, cfg, _treq(kind="chat", messages=[{"role": "user", "content": "hi"}]))
    assert tok.decode(chat.prompt_ids, skip_special=False).startswith("<s><|user|>\nhi</s>")
    for bad, code in ((_treq(kind="ids", token_ids=[5] * 32), "context_length_exceeded"),
                      (_treq(kind="ids", token_ids=[5] * 20, max_tokens=13), "context_length_exceeded"),
                      (_treq(kind="ids", token_ids=[]), None),
                      (_treq(kind="ids", token_ids=[1024]), None)):
        with pytest.raises(RequestError) as e:
            tokenize(tok, cfg, bad)
        assert e.value.code == code and str(e.value)


def test_stale_ipc_dirs_are_swept(tmp_path) -> None:
    import os
    import subprocess
    import sys

    from twinserve.server.ipc import IpcPaths

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / "twinserve-ipc-stale"
    stale.mkdir()
    (stale / "owner").write_text(dead)
    live = IpcPaths.create(str(tmp_path))  # owned by this (live) process
    other = IpcPaths.create(str(tmp_path))
    assert not stale.exists() and os.path.isdir(live.root) and os.path.isdir(other.root)
    live.remove()
    other.remove()


def test_engine_config_from_passes_the_backend_engine_keys(tmp_path) -> None:
    import json

    from twinserve.core.model_shapes import get_shape
    from twinserve.server.hydra_config import engine_config_from

    from omegaconf import OmegaConf

    from twinserve.core.conf_compose import compose

    cfg = OmegaConf.to_container(compose(["backend=engine", "model.path=/m", "scheduler.max_running=8",
                                          "backend.device=cpu", "backend.cpu_kv_tokens=4096",
                                          "backend.fast_plan=false"]), resolve=True)
    e = engine_config_from(cfg)
    assert (e.model, e.device, e.cpu_kv_tokens, e.overlap, e.scheduler["max_running"]) == ("/m", "cpu", 4096, None, 8)
    assert e.fast_plan is False
    cfg["backend"] = {}
    assert engine_config_from(cfg).cpu_kv_tokens == 65536 and engine_config_from(cfg).fast_plan is True
    # the engine-owned scheduler knobs reach EngineConfig (the token-graph ones were dropped before)
    cfg["scheduler"].update(piecewise_max_tokens=8192, token_graph_mode="piecewise", hybrid_decode_heavy=False,
                            page_size=32, max_graph_bs=64)
    e = engine_config_from(cfg)
    assert (e.piecewise_max_tokens, e.token_graph_mode, e.hybrid_decode_heavy, e.page_size, e.max_graph_bs) == \
        (8192, "piecewise", False, 32, 64)
    assert "piecewise_max_tokens" not in e.scheduler and e.scheduler["max_running"] == 8
    # composed from the Hydra tree: the model config's own token-graph cap, unless overridden
    from twinserve.server.hydra_config import compose_server_config

    dirs = {}
    for name in ("qwen3-0.6b", "llama3-8b"):  # composing checks that model.path holds a config,
        dirs[name] = tmp_path / name           # a tokenizer and weights (here only their names)
        dirs[name].mkdir()
        (dirs[name] / "config.json").write_text(json.dumps(get_shape(name).to_hf_config()))
        (dirs[name] / "tokenizer.json").write_text("{}")
        (dirs[name] / "model.safetensors").write_bytes(b"")
    qp, lp = f"model.path={dirs['qwen3-0.6b']}", f"model.path={dirs['llama3-8b']}"
    q, _ = compose_server_config(["model=qwen3-0.6b", qp])
    l, _ = compose_server_config([lp])
    o, _ = compose_server_config(["model=qwen3-0.6b", qp, "scheduler.piecewise_max_tokens=1024"])
    assert (q.piecewise_max_tokens, l.piecewise_max_tokens, o.piecewise_max_tokens) == (8192, 2048, 1024)
    _, sc = compose_server_config([lp, "replicas=2", "router=cache_aware", "+router_kwargs.load_weight=0.5"])
    assert (sc.replicas, sc.router, sc.router_kwargs) == (2, "cache_aware", {"load_weight": 0.5})
    assert compose_server_config([lp])[1].replicas == 1
    # server.replica_urls: a proxy, no engine and no model needed
    e, sc = compose_server_config(["server.replica_urls=[http://h:1/,http://h:2]", "router=prefix_affinity"])
    assert (e, sc.replica_urls, sc.router) == (None, ["http://h:1", "http://h:2"], "prefix_affinity")
    with pytest.raises(UserError, match="non-empty list"):
        compose_server_config(["server.replica_urls=[]"])
    with pytest.raises(UserError, match="router"):
        compose_server_config(["server.replica_urls=[http://h:1]", "router=nope"])
