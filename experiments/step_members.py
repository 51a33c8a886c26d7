"""Which requests each engine step served, rebuilt from a run's two tables:
``python -m twinserve.experiments.step_members RUN_DIR [--calibration FILE]``.

An engine run's ``steps.parquet`` holds each step's aggregate features (``decode_ctx``,
``max_ctx``, ...) and ``requests.parquet`` each request's token times; a token's time is the
``tokens_at`` of the step that produced it. Joined, they give one row per (step, request that
received a token from it) with that request's context then: ``prompt_tokens + token`` tokens of
KV, ``token`` being the output's index (a decode step's batch is its sequences of ``token >= 1``).
That is what per-sequence kernel rules (FlashInfer's split of each sequence's KV, waves of
sequences) act on and what the aggregates hide. The command prints how many decode steps it
rebuilt whole and, with a calibration, the step model's median error on them by batch size and
average context.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

MEMBER_COLUMNS = ("step", "rid", "token", "context")
SIZE_BINS = (0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 96, 128, 192, 256, 1024)
CONTEXT_BINS = (0, 256, 512, 1024, 2048, 4096, 1 << 20)


def step_members(steps: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per (step, request, output token) where the token's time is the step's
    ``tokens_at``: ``step`` is the label of the step's row in ``steps``. Tokens whose time
    matches no step (there are none in an engine run) are left out."""
    if "tokens_at" not in steps:
        raise ValueError("steps have no 'tokens_at' column: members are rebuilt from an engine run's tables")
    at = {float(t): i for i, t in zip(steps.index, steps["tokens_at"].to_numpy(np.float64)) if np.isfinite(t)}
    rows: list[tuple[int, int, int, int]] = []
    for rid, prompt, times in zip(requests["rid"], requests["prompt_tokens"], requests["token_times"]):
        for j, t in enumerate(np.asarray(times, dtype=np.float64)):
            i = at.get(float(t))
            if i is not None:
                rows.append((i, int(rid), j, int(prompt) + j))
    return pd.DataFrame(rows, columns=list(MEMBER_COLUMNS)).astype("int64")


def decode_batches(steps: pd.DataFrame, members: pd.DataFrame) -> pd.DataFrame:
    """Per decode step (no prefill) whose batch was rebuilt whole: ``n`` sequences and their
    context sum, max, min and mean, indexed like ``steps``. Whole means as many decode members
    as ``num_decodes`` and a context sum equal to ``decode_ctx``."""
    dec = members[members["token"] >= 1]
    g = dec.groupby("step")["context"].agg(n="size", ctx_sum="sum", ctx_max="max", ctx_min="min")
    g["ctx_mean"] = g["ctx_sum"] / g["n"]
    s = steps.loc[steps.index.intersection(g.index)]
    whole = (s["num_prefills"] == 0) & (s["num_decodes"] == g.loc[s.index, "n"]) \
        & (s["decode_ctx"] == g.loc[s.index, "ctx_sum"])
    return g.loc[whole[whole].index]


def error_table(steps: pd.DataFrame, batches: pd.DataFrame, predicted: np.ndarray) -> pd.DataFrame:
    """Median signed error (%) of ``predicted`` (one per row of ``steps``) against the steps'
    ``duration``, over ``batches``' steps, by batch size (rows) and mean context (columns),
    with the step counts."""
    e = pd.Series(100.0 * (predicted / steps["duration"].to_numpy(np.float64) - 1.0), index=steps.index)
    t = batches.assign(error=e.loc[batches.index],
                       size=pd.cut(batches["n"], SIZE_BINS), context=pd.cut(batches["ctx_mean"], CONTEXT_BINS))
    return t.groupby(["size", "context"], observed=True)["error"].agg(steps="size", median="median").round(2)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="an engine run folder (steps.parquet, requests.parquet)")
    ap.add_argument("--calibration", default=None, help="a calibration file: print its decode error table")
    args = ap.parse_args(argv)
    run = Path(args.run)
    steps = pd.read_parquet(run / "steps.parquet")
    steps = steps[steps["duration"] > 0]
    members = step_members(steps, pd.read_parquet(run / "requests.parquet"))
    batches = decode_batches(steps, members)
    n_dec = int(((steps["num_prefills"] == 0) & (steps["num_decodes"] > 0)).sum())
    print(f"{len(members)} (step, request) rows; {len(batches)} of {n_dec} decode steps rebuilt whole")
    if args.calibration:
        from twinserve.simulator.cost.calibration import Calibration
        from twinserve.calibration.fit import predict_span

        pred = predict_span(Calibration.load(args.calibration), steps.reset_index(drop=True))
        table = error_table(steps, batches, pred)
        print(table.unstack("context").to_string())


if __name__ == "__main__":
    main()
