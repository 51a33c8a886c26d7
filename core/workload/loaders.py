"""Trace loaders: Azure LLM trace CSV, Mooncake-style JSONL, ShareGPT-style JSON."""

from __future__ import annotations

import gzip
import io
import json
import warnings
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from twinserve.core.errors import UserError
from twinserve.core.workload.arrivals import arrival_times
from twinserve.core.workload.spec import RequestSpec
from twinserve.core.workload.streams import stream
from twinserve.core.workload.workload import Workload

BUNDLED = MappingProxyType({
    "azure_conv": "azure2023_conv.csv",
    "azure_code": "azure2023_code.csv",
})
BUNDLED_MOONCAKE = MappingProxyType({
    "mooncake_conv": "mooncake_conversation.jsonl.gz",
    "mooncake_synthetic": "mooncake_synthetic.jsonl.gz",
})
Tokenize = Callable[[str], Sequence[int] | np.ndarray]


def bundled_path(name: str) -> Any:
    """The packaged copy of a bundled trace (an importlib.resources Traversable)."""
    files = {**BUNDLED, **BUNDLED_MOONCAKE}
    if name not in files:
        raise KeyError(f"unknown bundled trace '{name}'; known: {', '.join(files)}")
    return resources.files("twinserve.core.workload").joinpath("data", files[name])


def _specs_from_columns(arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                        where: str, invalid: str) -> list[RequestSpec]:
    """One spec per row (rid = row index); rows with a missing or non-positive length raise
    (``invalid="raise"``) or are dropped with a warning that gives their count (``"drop"``)."""
    bad = ~(np.isfinite(arrival) & np.isfinite(prompt) & np.isfinite(output)
            & (prompt >= 1) & (output >= 1) & (arrival >= 0))
    rids = np.arange(arrival.size)
    if bad.any():
        rows = np.flatnonzero(bad)
        msg = (f"{where}: {rows.size} rows have a missing, negative or zero length or arrival "
               f"(first rows: {rows[:5].tolist()})")
        if invalid == "raise":
            raise UserError(msg + "; workload.invalid=drop skips them", "workload.invalid")
        if invalid != "drop":
            raise ValueError(f"invalid must be 'raise' or 'drop', got {invalid!r}")
        warnings.warn(msg + "; dropped", stacklevel=3)
        keep = ~bad
        arrival, prompt, output, rids = arrival[keep], prompt[keep], output[keep], rids[keep]
    return [RequestSpec(r, a, p, o) for r, a, p, o in
            zip(rids.tolist(), arrival.tolist(), prompt.astype(np.int64).tolist(),
                output.astype(np.int64).tolist())]


def _read_csv(path: Any, where: str, usecols: Sequence[str] | None = None, numeric: Sequence[str] = (),
              **kw: Any) -> pd.DataFrame:
    """``pd.read_csv`` keeping ``usecols``; its failures on the file's contents (empty,
    unreadable quoting, a column missing, a cell of a ``numeric`` column that is not a number)
    become a `UserError` naming the file and the line."""
    try:
        df = pd.read_csv(path, **kw)
    except pd.errors.EmptyDataError:
        raise UserError(f"{where}: the file is empty (a trace CSV needs a header row and one row per "
                        f"request)") from None
    except pd.errors.ParserError as e:
        detail = str(e).strip().splitlines()[-1]
        raise UserError(f"{where}: not a readable CSV ({detail}); check its quoting and "
                        f"delimiters") from None
    if usecols is None:
        return df
    missing = [c for c in usecols if c not in df.columns]
    if missing:
        raise UserError(f"{where}: no column {', '.join(missing)}; its columns: {', '.join(map(str, df.columns))} "
                        f"(name yours with workload.arrival_col, prompt_col, output_col)")
    df = df[list(usecols)]
    for c in numeric:
        if not pd.api.types.is_numeric_dtype(df[c]):
            num = pd.to_numeric(df[c], errors="coerce")
            bad = np.flatnonzero(num.isna().to_numpy() & df[c].notna().to_numpy())
            if bad.size:
                i = int(bad[0])
                raise UserError(f"{where}: line {i + 2} (request row {i}), column {c}: "
                                f"{df[c].iloc[i]!r} is not a number ({bad.size} such rows)")
            df[c] = num
    return df


def load_csv(path: str | Path | Any, arrival_col: str = "arrived_at",
             prompt_col: str = "num_prefill_tokens", output_col: str = "num_decode_tokens",
             time_unit: float = 1.0, name: str | None = None, seed: int = 0,
             vocab_size: int = 32000, invalid: str = "raise") -> Workload:
    """A CSV with one row per request: arrival (``time_unit`` seconds per unit, re-based so the
    first request arrives at 0), prompt length and output length columns."""
    with ExitStack() as stack:
        p = path if isinstance(path, (str, Path)) else stack.enter_context(resources.as_file(path))
        cols = [arrival_col, prompt_col, output_col]
        df = _read_csv(p, str(path), cols, cols, engine="c")
    arrival = df[arrival_col].to_numpy(dtype=np.float64) * float(time_unit)
    if arrival.size:
        arrival = arrival - np.nanmin(arrival)
    specs = _specs_from_columns(arrival, df[prompt_col].to_numpy(np.float64),
                                df[output_col].to_numpy(np.float64), str(path), invalid)
    return Workload(specs, name=name or Path(str(path)).stem, seed=seed, vocab_size=vocab_size)


def load_azure(path_or_name: str | Path, seed: int = 0, vocab_size: int = 32000,
               invalid: str = "raise") -> Workload:
    """The Azure LLM inference trace: a bundled name (``azure_conv``, ``azure_code``) or a path.

    Reads both the bundled layout (``arrived_at`` seconds, ``num_prefill_tokens``,
    ``num_decode_tokens``) and Azure's published layout (``TIMESTAMP`` datetimes,
    ``ContextTokens``, ``GeneratedTokens``).
    """
    key = str(path_or_name)
    if key in BUNDLED:
        return load_csv(bundled_path(key), name=key, seed=seed, vocab_size=vocab_size,
                        invalid=invalid)
    header = _read_csv(path_or_name, key, nrows=0).columns
    if "TIMESTAMP" not in header:
        return load_csv(path_or_name, seed=seed, vocab_size=vocab_size, invalid=invalid)
    df = _read_csv(path_or_name, key, ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
                   ["ContextTokens", "GeneratedTokens"])
    try:
        ts = pd.to_datetime(df["TIMESTAMP"], format="mixed")
    except (ValueError, TypeError) as e:
        raise UserError(f"{key}: column TIMESTAMP holds a value that is not a date and time ({e})") from None
    arrival = (ts - ts.min()).dt.total_seconds().to_numpy(np.float64)
    specs = _specs_from_columns(arrival, df["ContextTokens"].to_numpy(np.float64),
                                df["GeneratedTokens"].to_numpy(np.float64), key, invalid)
    return Workload(specs, name=Path(key).stem, seed=seed, vocab_size=vocab_size)


def _open_text(path: str | Path | Any) -> io.TextIOBase:
    """A text stream over ``path`` (a path or a resources Traversable); gunzipped when the name
    ends in ``.gz``."""
    name = str(getattr(path, "name", path))
    raw = path.open("rb") if not isinstance(path, (str, Path)) else open(path, "rb")
    if name.endswith(".gz"):
        raw = gzip.GzipFile(fileobj=raw, mode="rb")
    return io.TextIOWrapper(raw, encoding="utf-8")


def load_mooncake(path: str | Path | Any, block_size: int = 512, seed: int = 0,
                  vocab_size: int = 32000, invalid: str = "raise", name: str | None = None) -> Workload:
    """Mooncake-style JSONL (gzipped when the name ends in ``.gz``; a bundled name such as
    ``mooncake_conv`` reads the packaged copy): one object per line with ``timestamp`` (ms),
    ``input_length``, ``output_length`` and optionally ``hash_ids`` (one per ``block_size``
    prompt tokens; equal ids mean identical blocks). Arrivals are re-based so the first request
    arrives at 0."""
    if str(path) in BUNDLED_MOONCAKE:
        name = name or str(path)
        path = bundled_path(str(path))
    ts: list[float] = []
    inp: list[float] = []
    out: list[float] = []
    hashes: list[tuple[int, ...] | None] = []
    with _open_text(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                ts.append(float(row["timestamp"]))
                inp.append(float(row["input_length"]))
                out.append(float(row["output_length"]))
            except (ValueError, TypeError, KeyError) as e:
                what = f"no key {e}" if isinstance(e, KeyError) else str(e).splitlines()[0]
                raise UserError(f"{path}: line {n}: {what} (each line is a JSON object with timestamp, "
                                f"input_length, output_length and optionally hash_ids)") from None
            h = row.get("hash_ids")
            hashes.append(tuple(h) if h else None)
    _check_block_size(str(path), inp, hashes, block_size)
    arrival = np.asarray(ts) / 1000.0
    if arrival.size:
        arrival -= arrival.min()
    base = _specs_from_columns(arrival, np.asarray(inp), np.asarray(out), str(path), invalid)
    specs = [RequestSpec(s.rid, s.arrival, s.prompt_len, s.output_len, hash_ids=hashes[s.rid])
             for s in base]
    return Workload(specs, name=name or Path(str(path)).stem, seed=seed, vocab_size=vocab_size,
                    block_size=block_size)


BLOCK_SIZES = tuple(2 ** k for k in range(4, 17))  # candidates for the warning's suggestion


def _check_block_size(where: str, input_len: Sequence[float], hashes: Sequence[tuple[int, ...] | None],
                      block_size: int) -> None:
    """Warn once when some requests' ``len(hash_ids) * block_size`` and ``input_length`` differ
    by more than one block, naming the block size (a power of two) that fits the most."""
    pairs = [(n, len(h)) for n, h in zip(input_len, hashes) if h]
    if not pairs:
        return
    lens, blocks = np.asarray([p[0] for p in pairs]), np.asarray([p[1] for p in pairs])

    def misfits(bs: int) -> int:
        return int((np.abs(blocks * bs - lens) > bs).sum())

    bad = misfits(block_size)
    if bad:
        best = min(BLOCK_SIZES, key=misfits)
        warnings.warn(f"{where}: {bad} of {len(pairs)} requests' hash_ids times block_size={block_size} "
                      f"differ from input_length by more than one block; block_size={best} fits "
                      f"{len(pairs) - misfits(best)} of them (set workload.block_size={best})", stacklevel=3)


def byte_tokenize(text: str) -> np.ndarray:
    """Default tokenizer: one token per UTF-8 byte, id = byte value (0..255)."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)


_HUMAN = frozenset({"human", "user"})
_ASSISTANT = frozenset({"gpt", "assistant", "chatgpt", "bard"})


def load_sharegpt(path: str | Path, tokenize: Tokenize | None = None, rate: float = 1.0,
                  arrival: str = "poisson", arrival_kwargs: dict[str, Any] | None = None,
                  num_requests: int | None = None, shuffle: bool = False, seed: int = 0,
                  vocab_size: int = 32000) -> Workload:
    """ShareGPT-style JSON: a list of ``{"conversations": [{"from", "value"}, ...]}``.

    The prompt is the first human turn, tokenized by ``tokenize`` (default: `byte_tokenize`), and
    the answer is the first assistant turn after it (its tokens become ``output_tokens``, its
    length ``output_len``). Conversations without such a pair, or with an empty one, are
    skipped. Arrivals come from the named arrival process at ``rate`` req/s with the seed's own
    stream; ``shuffle`` samples conversations in a seeded random order before taking
    ``num_requests``.
    """
    tok = tokenize or byte_tokenize
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    order = np.arange(len(data))
    if shuffle:
        order = stream(seed, "sharegpt-sample").permutation(len(data))
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    for i in order.tolist():
        turns = data[i].get("conversations") or []
        prompt = answer = None
        for t in turns:
            who = t.get("from")
            if prompt is None and who in _HUMAN:
                prompt = t.get("value") or ""
            elif prompt is not None and who in _ASSISTANT:
                answer = t.get("value") or ""
                break
        if prompt is None or answer is None:
            continue
        p, a = np.asarray(tok(prompt), np.int32), np.asarray(tok(answer), np.int32)
        if p.size and a.size:
            pairs.append((p, a))
            if num_requests is not None and len(pairs) >= num_requests:
                break
    times = arrival_times(arrival, len(pairs), stream(seed, "arrivals"), rate,
                          **(arrival_kwargs or {}))
    specs = [RequestSpec(rid, float(t), p.size, a.size, tokens=p, output_tokens=a)
             for rid, (t, (p, a)) in enumerate(zip(times, pairs))]
    return Workload(specs, name=Path(path).stem, seed=seed, vocab_size=vocab_size)
