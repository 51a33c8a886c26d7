"""Synthetic workloads: independent requests, shared-prefix groups, multi-turn sessions.

Every generator draws each quantity (arrivals, lengths, groups, think times, ...) from its own
named stream of ``seed`` (see `streams.stream`), so the same arguments give the same workload.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from twinserve.core.workload import tokens as tk
from twinserve.core.workload.arrivals import arrival_times
from twinserve.core.workload.lengths import LengthSpec, describe, sample_lengths
from twinserve.core.workload.spec import RequestSpec
from twinserve.core.workload.streams import stream
from twinserve.core.workload.workload import Workload

DEFAULT_PROMPT: Mapping[str, Any] = {"dist": "uniform", "lo": 128, "hi": 1024}
DEFAULT_OUTPUT: Mapping[str, Any] = {"dist": "uniform", "lo": 16, "hi": 256}


def _labels(choices: Sequence[Any] | Mapping[Any, float] | None, default: Any, n: int,
            rng: np.random.Generator) -> list[Any]:
    """``n`` draws from ``choices`` (uniform for a sequence, weighted for a mapping)."""
    if not choices:
        return [default] * n
    if isinstance(choices, Mapping):
        names, w = list(choices), np.asarray(list(choices.values()), dtype=np.float64)
        idx = rng.choice(len(names), size=n, p=w / w.sum())
    else:
        names = list(choices)
        idx = rng.integers(0, len(names), size=n)
    return [names[i] for i in idx.tolist()]


def synthetic(num_requests: int = 1000, rate: float = 1.0, prompt_len: LengthSpec = DEFAULT_PROMPT,
              output_len: LengthSpec = DEFAULT_OUTPUT, arrival: str = "poisson",
              arrival_kwargs: Mapping[str, Any] | None = None,
              tenants: Sequence[str] | Mapping[str, float] | None = None,
              priorities: Sequence[int] | None = None, seed: int = 0, vocab_size: int = 32000,
              name: str | None = None) -> Workload:
    """Independent requests with unique random prompts.

    Arrivals: the named process (``poisson``, ``gamma`` with ``arrival_kwargs={"cv": ...}``) at
    ``rate`` req/s, first arrival at 0. ``tenants`` (uniform, or weighted by a mapping) and
    ``priorities`` (uniform) label requests for fairness and priority policies.
    """
    times = arrival_times(arrival, num_requests, stream(seed, "arrivals"), rate,
                          **dict(arrival_kwargs or {}))
    plen = sample_lengths(prompt_len, num_requests, stream(seed, "prompt-lens"))
    olen = sample_lengths(output_len, num_requests, stream(seed, "output-lens"))
    ten = _labels(tenants, "default", num_requests, stream(seed, "tenants"))
    pri = _labels(priorities, 0, num_requests, stream(seed, "priorities"))
    specs = [RequestSpec(i, t, p, o, tenant=str(te), priority=int(pr))
             for i, (t, p, o, te, pr) in enumerate(zip(times.tolist(), plen.tolist(),
                                                       olen.tolist(), ten, pri))]
    label = name or (f"{arrival}(rate={rate}) prompt={describe(prompt_len)} "
                     f"output={describe(output_len)}")
    return Workload(specs, name=label, seed=seed, vocab_size=vocab_size)


def shared_prefix(num_groups: int = 8, prefix_len: LengthSpec = 1024, suffix_len: LengthSpec = 128,
                  output_len: LengthSpec = DEFAULT_OUTPUT, num_requests: int = 1000,
                  rate: float = 1.0, arrival: str = "poisson",
                  arrival_kwargs: Mapping[str, Any] | None = None,
                  group_zipf_a: float | None = None, tenant_per_group: bool = False,
                  seed: int = 0, vocab_size: int = 32000, name: str | None = None) -> Workload:
    """Requests in ``num_groups`` groups; all requests of a group start with the same
    ``prefix_len`` tokens (a system prompt), followed by a unique ``suffix_len`` part.

    The prefix is expressed as ``hash_ids``: the workload's ``block_size`` is the gcd of the
    groups' prefix lengths and group ``g`` owns its own run of hash ids, so two requests share
    exactly their group's prefix and nothing else. Groups are picked uniformly, or with
    popularity proportional to ``rank ** -group_zipf_a``. With ``tenant_per_group`` each group is
    its own tenant (``group<g>``).
    """
    if num_groups < 1:
        raise ValueError(f"num_groups must be >= 1, got {num_groups}")
    glen = sample_lengths(prefix_len, num_groups, stream(seed, "prefix-lens"))
    if (glen < 1).any():
        raise ValueError("every prefix length must be >= 1")
    block = int(np.gcd.reduce(glen))
    nblocks = glen // block
    starts = np.concatenate([[0], np.cumsum(nblocks)[:-1]])
    group_hashes = [tuple(range(int(s), int(s + k))) for s, k in zip(starts, nblocks)]

    times = arrival_times(arrival, num_requests, stream(seed, "arrivals"), rate,
                          **dict(arrival_kwargs or {}))
    grng = stream(seed, "groups")
    if group_zipf_a:
        w = np.arange(1, num_groups + 1, dtype=np.float64) ** (-float(group_zipf_a))
        groups = grng.choice(num_groups, size=num_requests, p=w / w.sum())
    else:
        groups = grng.integers(0, num_groups, size=num_requests)
    suffix = sample_lengths(suffix_len, num_requests, stream(seed, "suffix-lens"))
    if (suffix < 0).any():
        raise ValueError("suffix lengths must be >= 0")
    olen = sample_lengths(output_len, num_requests, stream(seed, "output-lens"))
    specs = []
    for i, (t, g, sfx, o) in enumerate(zip(times.tolist(), groups.tolist(), suffix.tolist(),
                                           olen.tolist())):
        specs.append(RequestSpec(i, t, int(glen[g]) + sfx, o, hash_ids=group_hashes[g],
                                 tenant=f"group{g}" if tenant_per_group else "default"))
    label = name or f"shared_prefix(groups={num_groups}, prefix={describe(prefix_len)})"
    return Workload(specs, name=label, seed=seed, vocab_size=vocab_size, block_size=block)


def sessions(num_sessions: int = 100, turns: LengthSpec = 4, question_len: LengthSpec = 128,
             output_len: LengthSpec = DEFAULT_OUTPUT, think_time: float = 10.0,
             rate: float = 0.5, arrival: str = "poisson",
             arrival_kwargs: Mapping[str, Any] | None = None, system_prompt_len: int = 0,
             max_context: int | None = None, seed: int = 0, vocab_size: int = 32000,
             name: str | None = None) -> Workload:
    """Multi-turn chat sessions; the prompt of turn k+1 is the prompt of turn k, then turn k's
    answer (its ``output_tokens``), then a new question of ``question_len`` tokens.

    Session starts follow the arrival process at ``rate`` sessions/s; the number of turns of a
    session is drawn from ``turns``. OPEN-LOOP APPROXIMATION: turn k+1 arrives ``think``
    seconds after turn k *arrived* (exponential think times of mean ``think_time``), i.e. at the
    session start plus the cumulative think times, whether or not turn k has finished by then. A
    real user waits for the answer; pick ``think_time`` well above the expected latency, or read
    results knowing that a slow server sees follow-ups before their answer is done.

    All sessions may start with the same ``system_prompt_len`` tokens. With ``max_context`` a
    session ends before the first turn whose prompt + output would exceed it. Token ids are
    explicit: each session owns one buffer (system, q1, a1, q2, a2, ...) and every turn's prompt
    and answer are read-only views of it, so memory grows with the final context, not with the
    sum over turns. rids follow arrival order.
    """
    if think_time < 0 or system_prompt_len < 0:
        raise ValueError("think_time and system_prompt_len must be >= 0")
    starts = arrival_times(arrival, num_sessions, stream(seed, "arrivals"), rate,
                           **dict(arrival_kwargs or {}))
    nturns = sample_lengths(turns, num_sessions, stream(seed, "turns"))
    total = int(nturns.sum())
    qlen = sample_lengths(question_len, total, stream(seed, "question-lens"))
    olen = sample_lengths(output_len, total, stream(seed, "output-lens"))
    think = stream(seed, "think-times").exponential(think_time, size=total) if think_time > 0 \
        else np.zeros(total)
    system = tk.random_tokens(tk.derive_key(seed, tk.SESSION, -1), system_prompt_len, vocab_size)

    rows: list[tuple[float, int, np.ndarray, int, int]] = []  # (arrival, session, buf, plen, olen)
    k = 0
    for s in range(num_sessions):
        n = int(nturns[s])
        q, o = qlen[k:k + n], olen[k:k + n]
        t = starts[s] + np.concatenate([[0.0], np.cumsum(think[k:k + n - 1])])
        k += n
        ends = system_prompt_len + np.cumsum(q + o)           # context after each turn's answer
        plens = ends - o
        if max_context is not None:
            n = int(np.searchsorted(ends, max_context, side="right"))
        if n == 0:
            continue
        body = tk.random_tokens(tk.derive_key(seed, s, tk.SESSION),
                                int(ends[n - 1]) - system_prompt_len, vocab_size)
        buf = np.concatenate([system, body])
        for j in range(n):
            rows.append((float(t[j]), s, buf, int(plens[j]), int(o[j])))
    rows.sort(key=lambda r: r[0])
    specs = [RequestSpec(rid, a, p, o, session=s, tokens=buf[:p], output_tokens=buf[p:p + o])
             for rid, (a, s, buf, p, o) in enumerate(rows)]
    label = name or f"sessions(n={num_sessions}, turns={describe(turns)})"
    return Workload(specs, name=label, seed=seed, vocab_size=vocab_size)
