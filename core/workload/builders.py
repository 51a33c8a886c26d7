"""`WORKLOADS`: workload names that a Hydra config selects, each a builder taking keyword args.

Every builder accepts ``num_requests``, ``duration_s``, ``time_scale``, ``rate`` and ``seed``.
For trace workloads (``azure_conv``, ``azure_code``, ``csv``, ``mooncake``, ``mooncake_conv``,
``mooncake_synthetic``) they reshape the trace with `shape` (they also take ``start_s``, an
offset into the trace, and ``max_prompt_tokens``, a filter on prompt length); for generators
``num_requests``/``rate`` are native parameters and
``duration_s`` cuts the generated arrivals.
"""

from __future__ import annotations

import math
from typing import Any

from twinserve.core.errors import UserError
from twinserve.core.registry import Registry
from twinserve.core.workload import generators as gen
from twinserve.core.workload import loaders
from twinserve.core.workload import text
from twinserve.core.workload.workload import Workload

WORKLOADS: Registry[Workload] = Registry("workload")


def shape(w: Workload, num_requests: int | None = None, duration_s: float | None = None,
          time_scale: float | None = None, rate: float | None = None,
          start_s: float | None = None, max_prompt_tokens: int | None = None) -> Workload:
    """Reshape a trace, in this order: (0) ``start_s`` drops the requests of the trace's first
    ``start_s`` seconds (re-based at 0); (1) ``time_scale`` multiplies inter-arrival times;
    (2) ``num_requests`` keeps the first N; (3) ``rate`` rescales what is left to that mean
    rate (req/s); (4) ``duration_s`` keeps the first seconds of the result (re-based at 0);
    (5) ``max_prompt_tokens`` drops the requests of that slice with longer prompts (their count
    lands in ``Workload.filters``; the kept ones keep their arrival times).

    With ``rate`` and ``duration_s`` but no ``num_requests``, step (2) keeps the first
    ``round(rate * duration_s)`` requests, so the slice that runs has the mean rate asked for
    (rescaling the whole trace first would give a window at whatever rate that stretch had).
    """
    if start_s and len(w):
        w = w.window(float(w.arrivals[0]) + float(start_s), float("inf"))
    if time_scale is not None:
        w = w.scale_time(time_scale)
    if num_requests is None and rate is not None and duration_s is not None and not math.isinf(rate):
        num_requests = max(2, round(rate * duration_s))
    if num_requests is not None:
        w = w.head(num_requests)
    if rate is not None:
        w = w.with_rate(rate)
    if duration_s is not None:
        w = w.first_seconds(duration_s)
    if max_prompt_tokens is not None:
        w = _drop_long_prompts(w, int(max_prompt_tokens))
    return w


def _drop_long_prompts(w: Workload, limit: int) -> Workload:
    """`Workload.drop_long_prompts`, with a `UserError` for a limit below 1 or one that leaves
    no request."""
    key = "workload.max_prompt_tokens"
    if limit < 1:
        raise UserError(f"{key} must be >= 1 (a prompt length in tokens), got {limit}", key)
    out = w.drop_long_prompts(limit)
    if len(w) and not len(out):
        raise UserError(f"{key}={limit} drops all {len(w)} requests of the slice (its shortest "
                        f"prompt has {int(w.prompt_lens.min())} tokens)", key)
    return out


def _generated_count(num_requests: int | None, duration_s: float | None, rate: float) -> int:
    """How many requests to generate: ``num_requests``, or enough to fill ``duration_s`` at
    ``rate`` with overwhelming probability (the surplus is cut by `shape`)."""
    if num_requests is not None:
        return num_requests
    if duration_s is None:
        return 1000
    if math.isinf(rate):
        raise ValueError("duration_s with an infinite rate needs num_requests")
    mean = rate * duration_s
    return int(mean + 10.0 * math.sqrt(mean) + 20)


@WORKLOADS.register("azure_conv")
def azure_conv(num_requests: int | None = None, duration_s: float | None = None,
               time_scale: float | None = None, rate: float | None = None, seed: int = 0,
               vocab_size: int = 32000, start_s: float | None = None,
               max_prompt_tokens: int | None = None) -> Workload:
    """Bundled Azure 2023 conversation trace (19,366 requests, 58 min)."""
    return shape(loaders.load_azure("azure_conv", seed=seed, vocab_size=vocab_size),
                  num_requests, duration_s, time_scale, rate, start_s, max_prompt_tokens)


@WORKLOADS.register("azure_code")
def azure_code(num_requests: int | None = None, duration_s: float | None = None,
               time_scale: float | None = None, rate: float | None = None, seed: int = 0,
               vocab_size: int = 32000, start_s: float | None = None,
               max_prompt_tokens: int | None = None) -> Workload:
    """Bundled Azure 2023 code trace (8,819 requests, 57 min, bursty)."""
    return shape(loaders.load_azure("azure_code", seed=seed, vocab_size=vocab_size),
                  num_requests, duration_s, time_scale, rate, start_s, max_prompt_tokens)


@WORKLOADS.register("csv")
def csv(path: str, num_requests: int | None = None, duration_s: float | None = None,
        time_scale: float | None = None, rate: float | None = None, seed: int = 0,
        vocab_size: int = 32000, start_s: float | None = None, max_prompt_tokens: int | None = None,
        **columns: Any) -> Workload:
    """Any per-request CSV (`loaders.load_azure` layouts, or columns named in ``columns``:
    ``arrival_col``, ``prompt_col``, ``output_col``, ``time_unit``, ``invalid``)."""
    rows = {"invalid": columns.pop("invalid")} if "invalid" in columns else {}
    w = (loaders.load_csv(path, seed=seed, vocab_size=vocab_size, **rows, **columns) if columns
         else loaders.load_azure(path, seed=seed, vocab_size=vocab_size, **rows))
    return shape(w, num_requests, duration_s, time_scale, rate, start_s, max_prompt_tokens)


@WORKLOADS.register("mooncake")
def mooncake(path: str, block_size: int = 512, num_requests: int | None = None,
             duration_s: float | None = None, time_scale: float | None = None,
             rate: float | None = None, seed: int = 0, vocab_size: int = 32000,
             start_s: float | None = None, max_prompt_tokens: int | None = None,
             **rows: Any) -> Workload:
    """Mooncake-style JSONL (``.jsonl`` or ``.jsonl.gz``) with block ``hash_ids`` (``rows``:
    `loaders.load_mooncake`'s ``invalid``)."""
    w = loaders.load_mooncake(path, block_size=block_size, seed=seed, vocab_size=vocab_size, **rows)
    return shape(w, num_requests, duration_s, time_scale, rate, start_s, max_prompt_tokens)


@WORKLOADS.register("mooncake_conv")
def mooncake_conv(num_requests: int | None = None, duration_s: float | None = None,
                  time_scale: float | None = None, rate: float | None = None, seed: int = 0,
                  vocab_size: int = 32000, start_s: float | None = None,
                  max_prompt_tokens: int | None = None, block_size: int = 512) -> Workload:
    """Bundled Mooncake FAST'25 conversation trace (12,031 requests, 59 min, 512-token block
    hashes; prompts 12,035 tokens on average, up to 126,195)."""
    return mooncake("mooncake_conv", block_size, num_requests, duration_s, time_scale, rate, seed,
                    vocab_size, start_s, max_prompt_tokens)


@WORKLOADS.register("mooncake_synthetic")
def mooncake_synthetic(num_requests: int | None = None, duration_s: float | None = None,
                       time_scale: float | None = None, rate: float | None = None, seed: int = 0,
                       vocab_size: int = 32000, start_s: float | None = None,
                       max_prompt_tokens: int | None = None, block_size: int = 512) -> Workload:
    """Bundled Mooncake FAST'25 synthetic trace (3,993 requests, Poisson arrivals, 512-token
    block hashes, prompts 15,325 tokens on average)."""
    return mooncake("mooncake_synthetic", block_size, num_requests, duration_s, time_scale, rate,
                    seed, vocab_size, start_s, max_prompt_tokens)


@WORKLOADS.register("sharegpt")
def sharegpt(path: str, num_requests: int | None = None, duration_s: float | None = None,
             time_scale: float | None = None, rate: float | None = None, seed: int = 0,
             vocab_size: int = 32000, arrival: str = "poisson",
             arrival_kwargs: dict[str, Any] | None = None, shuffle: bool = False) -> Workload:
    """ShareGPT-style JSON, byte-level tokens, arrivals from ``arrival`` at ``rate`` (default 1)."""
    r = 1.0 if rate is None else rate
    n = None if num_requests is None and duration_s is None else \
        _generated_count(num_requests, duration_s, r)
    w = loaders.load_sharegpt(path, rate=r, arrival=arrival, arrival_kwargs=arrival_kwargs,
                              num_requests=n, shuffle=shuffle, seed=seed, vocab_size=vocab_size)
    return shape(w, num_requests, duration_s, time_scale, None)


def _synthetic(arrival: str, num_requests: int | None, duration_s: float | None,
               time_scale: float | None, rate: float | None, seed: int,
               **kwargs: Any) -> Workload:
    r = 1.0 if rate is None else rate
    w = gen.synthetic(num_requests=_generated_count(num_requests, duration_s, r), rate=r,
                      arrival=arrival, seed=seed, **kwargs)
    return shape(w, None, duration_s, time_scale, None)


@WORKLOADS.register("poisson")
def poisson(num_requests: int | None = None, duration_s: float | None = None,
            time_scale: float | None = None, rate: float | None = None, seed: int = 0,
            **kwargs: Any) -> Workload:
    """Synthetic Poisson arrivals; ``kwargs`` go to `generators.synthetic` (prompt_len,
    output_len, tenants, priorities, vocab_size, name)."""
    return _synthetic("poisson", num_requests, duration_s, time_scale, rate, seed, **kwargs)


@WORKLOADS.register("gamma")
def gamma(num_requests: int | None = None, duration_s: float | None = None,
          time_scale: float | None = None, rate: float | None = None, seed: int = 0,
          cv: float = 2.0, **kwargs: Any) -> Workload:
    """Synthetic bursty arrivals (gamma gaps of coefficient of variation ``cv``)."""
    return _synthetic("gamma", num_requests, duration_s, time_scale, rate, seed,
                      arrival_kwargs={"cv": cv}, **kwargs)


@WORKLOADS.register("shared_prefix")
def shared_prefix(num_requests: int | None = None, duration_s: float | None = None,
                  time_scale: float | None = None, rate: float | None = None, seed: int = 0,
                  **kwargs: Any) -> Workload:
    """Shared system prompts per group; ``kwargs`` go to `generators.shared_prefix`."""
    r = 1.0 if rate is None else rate
    w = gen.shared_prefix(num_requests=_generated_count(num_requests, duration_s, r), rate=r,
                          seed=seed, **kwargs)
    return shape(w, None, duration_s, time_scale, None)


@WORKLOADS.register("sessions")
def sessions(num_requests: int | None = None, duration_s: float | None = None,
             time_scale: float | None = None, rate: float | None = None, seed: int = 0,
             **kwargs: Any) -> Workload:
    """Multi-turn sessions; ``rate`` is session starts per second (default 0.5); ``kwargs`` go
    to `generators.sessions`. ``num_requests`` and ``duration_s`` cut the result (turns whose
    arrival falls outside are dropped, so a session can end early)."""
    w = gen.sessions(rate=0.5 if rate is None else rate, seed=seed, **kwargs)
    return shape(w, num_requests, duration_s, time_scale, None)


def _need_tokenizer(tokenizer: str | None, name: str) -> str:
    if not tokenizer:
        raise ValueError(f"workload '{name}' needs tokenizer=DIR (a model directory with tokenizer files; "
                         "in a run config workload.tokenizer defaults to model.path)")
    return str(tokenizer)


@WORKLOADS.register("code_edit")
def code_edit(tokenizer: str | None = None, num_requests: int | None = None, duration_s: float | None = None,
              time_scale: float | None = None, rate: float | None = None, seed: int = 0,
              arrival: str = "poisson", arrival_kwargs: dict[str, Any] | None = None,
              **kwargs: Any) -> Workload:
    """Real text: a standard-library function and a request for it with one small change,
    tokenized by ``tokenizer`` (a model directory) through its chat template; arrivals from
    ``arrival`` at ``rate`` (default 1); ``kwargs`` go to `text.code_edit_workload`."""
    r = 1.0 if rate is None else rate
    w = text.code_edit_workload(_need_tokenizer(tokenizer, "code_edit"),
                                _generated_count(num_requests, duration_s, r), r, seed, arrival,
                                arrival_kwargs, **kwargs)
    return shape(w, None, duration_s, time_scale, None)


@WORKLOADS.register("questions")
def questions(tokenizer: str | None = None, num_requests: int | None = None, duration_s: float | None = None,
              time_scale: float | None = None, rate: float | None = None, seed: int = 0,
              arrival: str = "poisson", arrival_kwargs: dict[str, Any] | None = None,
              **kwargs: Any) -> Workload:
    """Real text: short questions, tokenized by ``tokenizer`` (a model directory) through its
    chat template; arrivals from ``arrival`` at ``rate`` (default 1); ``kwargs`` go to
    `text.questions_workload` (``output_len``)."""
    r = 1.0 if rate is None else rate
    w = text.questions_workload(_need_tokenizer(tokenizer, "questions"),
                                _generated_count(num_requests, duration_s, r), r, seed, arrival,
                                arrival_kwargs, **kwargs)
    return shape(w, None, duration_s, time_scale, None)


def build(name: str, **kwargs: Any) -> Workload:
    """``WORKLOADS.create(name, **kwargs)``, with Hydra containers turned into plain ones."""
    plain = {k: (dict(v) if hasattr(v, "items") else list(v) if isinstance(v, (list, tuple))
                 or type(v).__name__ == "ListConfig" else v) for k, v in kwargs.items()}
    return WORKLOADS.create(name, **plain)
