"""Reading the engine's per-step timeline (overlap scheduling) into what the fits need.

The engine records, per step, host times on its ``now()`` clock and the step's device span
(CUDA events against the same origin); see `twinserve.engine.engine.Engine`. This module turns
them into the quantities of the simulator's overlap loop (``PipelinedReplica``):

- ``mark``: when the host marked the step's device start (``iter_start + sched_s +
  plan_wait_s``); ``prev_end``: the previous step's device end;
- ``graph``: a step replayed as one CUDA graph (`linear.graph_replays`), which the device
  can only start once the host has enqueued the replay;
- ``device_s``: the device's own work: for a graph step the time from ``max(dev_start,
  enqueued)`` to ``dev_end``, where ``enqueued`` is when its graph replay was enqueued
  (``replay_end``; ``launch_end`` in profiles recorded before that column existed, which reads
  short when the host work after the replay is slow); for an eager step (kernels run as they are launched) the span
  ``dev_end - dev_start``, usable only where the device, not the host, set the pace
  (``device_ok``: it ended more than ``EAGER_MARGIN_S`` after the launch);
- ``tail_s``: for eager steps, ``dev_end - launch_end`` (how long the device runs past the
  host's last launch);
- ``sync`` (separately for graph and eager steps): whether the launch blocks until the
  previous step's device end (a host copy from pageable memory can do that); then
  ``launch_work = launch_end - max(mark, prev_end)``, else ``launch_work = launch_s``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from twinserve.calibration.linear import graph_replays

EAGER_MARGIN_S = 5e-4
TIMELINE = ("iter_start", "sched_s", "launch_s", "launch_end", "plan_wait_s", "dev_start", "dev_end")
# Also read where present: "replay_end" (`graph_enqueued`).


def has_timeline(steps: pd.DataFrame) -> bool:
    return all(c in steps for c in TIMELINE) and bool(steps["dev_end"].notna().any())


def runs_of(steps: pd.DataFrame) -> pd.Series:
    """A run id per row: rows are in execution order and a run ends where the clock restarts."""
    it = steps["iter_start"].to_numpy(np.float64)
    return pd.Series(np.concatenate([[0], np.cumsum(np.diff(it) < 0)]), index=steps.index)


def timeline_frame(steps: pd.DataFrame) -> pd.DataFrame:
    """Per row (same index): mark, prev_end, graph, device_s, device_ok, tail_s; the launch
    work comes from `launch_work` once ``sync`` is known."""
    out = pd.DataFrame(index=steps.index)
    prev_end = pd.Series(np.nan, index=steps.index)
    for _, g in steps.groupby(runs_of(steps), sort=False):
        g = g.sort_values("iter_start", kind="stable")
        prev_end.loc[g.index] = np.concatenate([[np.nan], g["dev_end"].to_numpy(np.float64)[:-1]])
    out["prev_end"] = prev_end
    out["mark"] = steps["iter_start"] + steps["sched_s"] + steps["plan_wait_s"]
    out["graph"] = graph_replays(steps)
    after_launch = steps["dev_end"] - np.maximum(steps["dev_start"], graph_enqueued(steps))
    out["tail_s"] = steps["dev_end"] - steps["launch_end"]
    out["device_s"] = np.where(out["graph"], after_launch, steps["dev_end"] - steps["dev_start"])
    out["device_ok"] = out["graph"] | (out["tail_s"] > EAGER_MARGIN_S)
    return out


def graph_enqueued(steps: pd.DataFrame) -> pd.Series:
    """When each step's device work could begin as far as the host is concerned: the graph
    replay's enqueue (``replay_end``) where recorded, else ``launch_end``."""
    le = steps["launch_end"]
    if "replay_end" not in steps:
        return le
    re = steps["replay_end"]
    return re.where(re.notna(), le)


def detect_sync(steps: pd.DataFrame, tl: pd.DataFrame, graph: bool) -> bool:
    """Whether the launch of graph (or eager) steps waits for the previous step's device end:
    regressed on the time the device still had to run at the mark (``max(0, prev_end -
    mark)``), a blocking ``launch_s`` grows one for one with it (slope near 1), a non-blocking
    one does not (slope near 0). Needs 20 steps with the device busy at their mark."""
    sel = (tl["graph"] == graph) & tl["prev_end"].notna()
    x = np.maximum(0.0, (tl["prev_end"] - tl["mark"])[sel].to_numpy(np.float64))
    y = steps.loc[sel, "launch_s"].to_numpy(np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if (x > 3e-4).sum() < 20:
        return False
    slope = np.polyfit(x, y, 1)[0]
    return bool(slope > 0.5)


def launch_work(steps: pd.DataFrame, tl: pd.DataFrame, sync_graph: bool, sync_eager: bool) -> pd.Series:
    """The host's own launch work per step (the wait for the device taken out where the launch
    blocks: graph and/or eager steps)."""
    blocks = np.where(tl["graph"], sync_graph, sync_eager)
    start = np.where(blocks, np.fmax(tl["mark"], tl["prev_end"]), tl["mark"])  # fmax: no prev
    return pd.Series(np.where(blocks, steps["launch_end"] - start, steps["launch_s"]), index=steps.index)


def ran_overlapped(steps: pd.DataFrame) -> bool | None:
    """Whether the engine that recorded ``steps`` overlapped: a step's tokens then reach the
    scheduler after the next step's loop iteration began. None without the timeline."""
    if not all(c in steps for c in ("iter_start", "tokens_at")):
        return None
    flags = []
    for _, g in steps.groupby(runs_of(steps), sort=False):
        g = g.sort_values("iter_start", kind="stable")
        tok = g["tokens_at"].to_numpy(np.float64)[:-1]
        nxt = g["iter_start"].to_numpy(np.float64)[1:]
        ok = np.isfinite(tok) & np.isfinite(nxt)
        flags.append(tok[ok] > nxt[ok])
    f = np.concatenate(flags) if flags else np.zeros(0, bool)
    return bool(f.mean() > 0.5) if f.size else None


def coupled_span(device: np.ndarray, steps: pd.DataFrame, graph: np.ndarray, tail: float) -> np.ndarray:
    """The device span the engine's events measure (its ``duration``) for steps of ``device``
    work, given each step's measured device start and launch end: a graph step cannot start
    before its replay was enqueued (`graph_enqueued`), an eager one ends at least ``tail``
    after its launch::

        max(dev_start + device, (enqueued + device) if graph else (launch_end + tail)) - dev_start
    """
    d0 = steps["dev_start"].to_numpy(np.float64)
    ready = np.where(graph, graph_enqueued(steps).to_numpy(np.float64) + device,
                     steps["launch_end"].to_numpy(np.float64) + tail)
    return np.maximum(d0 + device, ready) - d0
