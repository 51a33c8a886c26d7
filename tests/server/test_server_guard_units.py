"""Process-free units of the server's guards: bad text, prompt limits, the tokenizer's job loop,
the heartbeat, the API-key paths, the queue limit and the engine counters in the metrics."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from twinserve.server.auth import protected
from twinserve.server.engine_worker import EngineLoop, EngineWorkerConfig
from twinserve.server.health import EngineHeartbeat
from twinserve.server.messages import (
    AbortRequest, Accepted, ErrorReply, GenerateRequest, RequestTimes, StepInputs, TokenizeRequest,
    decode,
)
from twinserve.server.metrics import ServerMetrics
from twinserve.server.prompt_limit import BOUNDARY_SLACK, CHUNK_CHARS, PromptLimit, spans
from twinserve.server.text_guard import find_bad_text
from twinserve.server.tokenization import TextTokenizer
from twinserve.server.tokenizer_worker import (
    RequestError, TokenizerLoop, TokenizerWorkerConfig, tokenize,
)


@pytest.fixture(scope="module")
def tok(tiny_model: str) -> TextTokenizer:
    return TextTokenizer(tiny_model)


def test_bad_text_is_found_with_its_path() -> None:
    assert find_bad_text({"prompt": "fine é ✓", "messages": [{"content": "a\x00b"}]}) is None
    assert find_bad_text({"prompt": "ab\ud800cd"})[0] == "prompt"
    path, why = find_bad_text({"messages": [{"content": "x"}, {"content": [{"text": "\udfff"}]}]})
    assert path == "messages.1.content.0.text" and "U+DFFF" in why
    assert find_bad_text({"messages": [{"role": "user", "name": "a\x00"}]})[0] == "messages.0.name"
    assert find_bad_text({"model": "m\x00"})[0] == "model"
    assert find_bad_text({"input_ids": [1, 2, 3], "stop": ["ok", "\ud83d"]})[0] == "stop.1"
    assert find_bad_text({"p": json.loads('"\\ud83d\\ude00"')}) is None  # JSON joins a proper pair


def test_spans_cover_the_text_and_cut_before_spaces() -> None:
    text = ("word " * 20000) + "x" * 50000
    cuts = list(spans(text))
    assert cuts[0][0] == 0 and cuts[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
    assert all(0 < e - s <= CHUNK_CHARS for s, e in cuts)
    assert all(text[e] == " " for _, e in cuts[:-1] if e < 100000)


def test_char_bound_refuses_without_tokenizing(tok: TextTokenizer) -> None:
    cfg = TokenizerWorkerConfig("", max_model_len=32, vocab_size=tok.vocab_size)
    lim = PromptLimit(32, tok.longest_token_chars())
    calls = []
    tok_spy = SimpleNamespace(**{k: getattr(tok, k) for k in ("num_special", "longest_token_chars",
                                                             "render_chat")})
    tok_spy.encode = lambda *a, **k: calls.append("encode") or tok.encode(*a, **k)
    tok_spy.count = lambda t: calls.append("count") or tok.count(t)
    req = TokenizeRequest(1, "text", "a" * (lim.max_chars + 1), None, None, {}, None, 16, {}, 0.0)
    with pytest.raises(RequestError) as e:
        tokenize(tok_spy, cfg, req, lim)
    assert e.value.code == "context_length_exceeded" and "characters" in str(e.value)
    assert calls == []


def test_chunked_count_stops_early_and_fitting_text_is_exact(tok: TextTokenizer) -> None:
    big = 40000  # a context whose character bound (big x 5 for the tiny tokenizer) passes 10 chunks
    lim = PromptLimit(big, tok.longest_token_chars())
    cfg = TokenizerWorkerConfig("", max_model_len=big, vocab_size=tok.vocab_size)
    words = " ".join(f"w{i % 97}" for i in range(100000))[: lim.max_chars]  # ~0.74 tokens a character
    counted = []
    tok_spy = SimpleNamespace(**{k: getattr(tok, k) for k in ("num_special", "encode", "render_chat")})
    tok_spy.count = lambda t: counted.append(len(t)) or tok.count(t)
    req = TokenizeRequest(1, "text", words, None, None, {}, None, 16, {}, 0.0)
    with pytest.raises(RequestError) as e:
        tokenize(tok_spy, cfg, req, lim)
    assert "at least" in str(e.value) and e.value.code == "context_length_exceeded"
    assert len(words) > 10 * CHUNK_CHARS and sum(counted) < 0.4 * len(words)  # stopped at ~40000 tokens
    # a text longer than one chunk that fits: the ids are exactly the whole text's
    fits = " ".join(f"w{i % 97}" for i in range(CHUNK_CHARS))[: 3 * CHUNK_CHARS]
    n = len(tok.encode(fits))
    assert len(fits) > CHUNK_CHARS and n < big
    g = tokenize(tok, cfg, TokenizeRequest(2, "text", fits, None, None, {}, None, 16, {}, 0.0), lim)
    assert g.prompt_ids == tok.encode(fits)
    # the margin is what the chunked count may differ by per cut
    cuts = list(spans(fits))
    assert abs(sum(tok.count(fits[s:e]) for s, e in cuts) + tok.num_special() - n) <= BOUNDARY_SLACK * len(cuts)


class _Sink:
    def __init__(self) -> None:
        self.msgs: list[object] = []

    def send(self, data: object, copy: bool = True) -> None:
        self.msgs.append(decode(bytes(data)))


def test_tokenizer_loop_serves_short_requests_between_chunks(tok: TextTokenizer) -> None:
    cfg = TokenizerWorkerConfig("", max_model_len=100000, vocab_size=tok.vocab_size)
    eng, api = _Sink(), _Sink()
    loop = TokenizerLoop(tok, cfg, eng, api)
    long_text = "lorem ipsum " * 12000  # 144000 characters, 84001 tokens: fits, in 9 chunks
    loop.handle(TokenizeRequest(1, "text", long_text, None, None, {}, None, 16, {}, 0.0))
    assert 1 in loop.jobs and eng.msgs == []  # one chunk done, the rest pending
    loop.handle(TokenizeRequest(2, "text", "short", None, None, {}, None, 16, {}, 0.0))
    assert [m.rid for m in eng.msgs] == [2]  # answered at once, ahead of the long one
    loop.handle(TokenizeRequest(3, "text", long_text, None, None, {}, None, 16, {}, 0.0))
    loop.handle(AbortRequest(3, "client"))
    assert 3 not in loop.jobs and isinstance(eng.msgs[-1], AbortRequest)
    while loop.jobs:
        loop.advance()
    done = [m for m in eng.msgs if isinstance(m, GenerateRequest)]
    assert [m.rid for m in done] == [2, 1] and done[1].prompt_ids == tok.encode(long_text)
    assert api.msgs == []


def test_heartbeat_stalls_once_and_recovers() -> None:
    hb = EngineHeartbeat(2.0, last=100.0)
    assert hb.check(101.0) is None
    why = hb.check(102.5)
    assert why is not None and "engine_stall_s=2" in why and hb.stalled == why
    assert hb.check(110.0) is None and hb.stalled == why  # reported once
    assert hb.beat(111.0) is True and hb.stalled is None and hb.check(112.0) is None
    assert EngineHeartbeat(None, last=0.0).check(1e9) is None


def test_protected_paths() -> None:
    for p in ("/v1/completions", "/v1/chat/completions", "/v1/models", "/v1/models/x", "/generate", "/v1"):
        assert protected(p), p
    for p in ("/health", "/metrics", "/openapi.json", "/docs", "/generated", "/v1x"):
        assert not protected(p), p


class _FakeEngine:
    """Holds every request as waiting; never runs one (the queue limit must not depend on it)."""

    def __init__(self, max_running: int) -> None:
        self.sched_config = SimpleNamespace(max_running=max_running)
        self.scheduler = SimpleNamespace(num_preemptions=3, cache=SimpleNamespace(
            stats=SimpleNamespace(queried_tokens=40, hit_tokens=16)))
        self.reqs: dict[int, object] = {}

    def add(self, req) -> None:
        self.reqs[req.rid] = req

    def abort(self, rid: int) -> bool:
        self.reqs.pop(rid, None)
        return False  # reports no final output itself: the worker sends one

    def stats(self) -> dict:
        return {"running": 0, "waiting": len(self.reqs)}


def _gen(rid: int) -> GenerateRequest:
    return GenerateRequest(rid, [1, 2, 3], {"max_tokens": 4, "temperature": 1.0}, {}, 0.0)


def test_queue_limit_counts_held_requests_exactly() -> None:
    out = _Sink()
    loop = EngineLoop(_FakeEngine(max_running=4), out, EngineWorkerConfig(None, "", 3, 0.1))
    loop.apply(StepInputs([_gen(i) for i in range(5)], []))
    loop.apply(StepInputs([_gen(i) for i in range(5, 12)], []))
    acc = [m.rid for m in out.msgs if isinstance(m, Accepted)]
    rej = [m for m in out.msgs if isinstance(m, ErrorReply)]
    assert acc == list(range(7)) and [m.rid for m in rej] == list(range(7, 12))
    assert all(m.status == 429 and m.code == "queue_full" for m in rej)
    out.msgs.clear()
    loop.apply(StepInputs([_gen(20)], [0, 1]))  # two leave: exactly two places
    loop.apply(StepInputs([_gen(21), _gen(22)], []))
    assert [type(m).__name__ for m in out.msgs if not hasattr(m, "rids")] == ["Accepted", "Accepted", "ErrorReply"]


def test_engine_counters_and_phase_times_reach_the_metrics() -> None:
    out = _Sink()
    loop = EngineLoop(_FakeEngine(max_running=1), out, EngineWorkerConfig(None, "", None, 0.0))
    loop.publish_stats(force=True)
    stats = out.msgs[-1].stats
    assert stats["num_preemptions"] == 3 and stats["prefix_cache_hit_tokens"] == 16
    m = ServerMetrics("tiny")
    m.update_engine(stats)
    m.update_engine({**stats, "num_preemptions": 5})
    m.observe_request_times(RequestTimes([0.5], [0.25], [2.0]))
    text = m.render().decode()
    assert 'twinserve_num_preemptions_total{model_name="tiny"} 5.0' in text
    assert 'twinserve_prefix_cache_queries_total{model_name="tiny"} 40.0' in text
    assert 'twinserve_prefix_cache_hits_total{model_name="tiny"} 16.0' in text
    assert 'twinserve_request_queue_time_seconds_sum{model_name="tiny"} 0.5' in text
    assert 'twinserve_request_decode_time_seconds_count{model_name="tiny"} 1.0' in text
    m.update_engine({"running": 3, "waiting": 2, "kv_usage": 0.5})
    m.reset_engine()
    text = m.render().decode()
    assert 'twinserve_num_requests_running{model_name="tiny"} 0.0' in text
    assert 'twinserve_kv_cache_usage_perc{model_name="tiny"} 0.0' in text


def test_request_times_of_finished_requests() -> None:
    from twinserve.core.request import Req
    from twinserve.core.sampling import SamplingParams
    from twinserve.server.engine_worker import request_times

    r = Req(1, [1, 2], SamplingParams(max_tokens=2), arrival=10.0)
    r.t_scheduled, r.t_first_token, r.t_finish = 10.5, 11.0, 13.0
    never = Req(2, [1], SamplingParams(max_tokens=2), arrival=10.0)
    t = request_times([r, never])
    assert (t.queue_s, t.prefill_s, t.decode_s) == ([0.5], [0.5], [2.0])
    assert request_times([never]) is None


class _Busy(_FakeEngine):
    """Always has work; each step takes 30 ms; the 20th ends the loop."""

    class Done(Exception):
        pass

    def __init__(self) -> None:
        super().__init__(max_running=1)
        self.steps_run = 0

    def has_work(self) -> bool:
        return True

    def step(self) -> list:
        time.sleep(0.03)
        self.steps_run += 1
        if self.steps_run == 20:
            raise _Busy.Done
        return []


class _EmptyInbox:
    def poll(self, timeout_ms: int) -> int:
        return 0

    def recv(self, flags: int = 0, copy: bool = True) -> bytes:
        import zmq

        raise zmq.Again()


def test_busy_engine_loop_keeps_beating() -> None:
    out = _Sink()
    loop = EngineLoop(_Busy(), out, EngineWorkerConfig(None, "", None, 0.1))
    with pytest.raises(_Busy.Done):
        loop.run(_EmptyInbox())
    beats = [m for m in out.msgs if type(m).__name__ == "EngineStats"]
    assert len(beats) >= 5  # 0.6 s of back-to-back steps, one beat per 0.1 s


def test_labelled_counters_keep_one_child_per_value() -> None:
    m = ServerMetrics("m")
    a, b = m.http.labels(status="200"), m.http.labels(status="200")
    assert a is b and a is not m.http.labels(status="404")
    a.inc(2)
    assert m.registry.get_sample_value("twinserve_http_requests_total", {"model_name": "m", "status": "200"}) == 2
