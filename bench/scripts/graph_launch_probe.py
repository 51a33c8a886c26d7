"""Does the device start a CUDA graph before the host's launch call returns? On the GPU:
``python3 bench/scripts/graph_launch_probe.py [--nodes 60 360 720] [--repeats 200]``.

The calibration reads a host-bound graph step's device work as its device end minus the host
time its replay call returned (`calibration.timeline`). That is the device's work only if the
device starts the graph after the call returns. For a graph of N small kernels (a chain of
576-wide bf16 products at one row, the size of SmolLM2-135M's decode) this prints the medians
over the repeats of:

- ``launch``: the host time of ``graph.replay()`` with the device idle;
- ``idle span``: device time from an event recorded just before that call to one just after;
- ``pure``: the graph's device time with its launch hidden (queued behind a sleeping kernel);
- ``in-graph``: device time from an event recorded inside the graph, as its first node, to
  the end event, with the device idle before the launch (the graph's own device span);
- ``read``: idle span minus launch, what the calibration reads as the device work.

If the device waited for the call, idle span = launch + pure and read = pure; ``early`` =
launch + pure - idle span is how much of the launch the device overlapped.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def _graph(nodes: int, width: int) -> tuple[torch.cuda.CUDAGraph, torch.cuda.Event]:
    x = torch.randn(1, width, device="cuda", dtype=torch.bfloat16)
    ws = [torch.randn(width, width, device="cuda", dtype=torch.bfloat16) / width ** 0.5 for _ in range(8)]
    first = torch.cuda.Event(enable_timing=True, external=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm the kernels up outside the capture
        y = x
        for i in range(nodes):
            y = y @ ws[i % len(ws)]
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        first.record()
        y = x
        for i in range(nodes):
            y = y @ ws[i % len(ws)]
    torch.cuda.synchronize()
    return g, first


def probe(nodes: int, width: int, repeats: int) -> dict[str, float]:
    g, first = _graph(nodes, width)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    launch, idle, pure, ingraph = [], [], [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        time.sleep(1e-3)
        a.record()
        t0 = time.perf_counter()
        g.replay()
        launch.append(time.perf_counter() - t0)
        b.record()
        b.synchronize()
        idle.append(a.elapsed_time(b) / 1e3)
        try:
            ingraph.append(first.elapsed_time(b) / 1e3)
        except RuntimeError:  # a CUDA without timing for events recorded by a graph node
            ingraph.append(float("nan"))
        torch.cuda._sleep(20_000_000)  # about 10 ms of one spinning kernel: the launch hides behind it
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        pure.append(a.elapsed_time(b) / 1e3)
    m = {k: float(np.median(v)) * 1e3 for k, v in
         (("launch", launch), ("idle", idle), ("pure", pure), ("ingraph", ingraph))}
    m["read"] = m["idle"] - m["launch"]
    m["early"] = m["launch"] + m["pure"] - m["idle"]
    return m


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", nargs="+", type=int, default=[60, 360, 720])
    ap.add_argument("--width", type=int, default=576)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args(argv)
    print(torch.cuda.get_device_name(), f"torch {torch.__version__}")
    print("| nodes | launch (ms) | idle span | pure | in-graph | read = idle - launch | early |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.nodes:
        m = probe(n, args.width, args.repeats)
        print(f"| {n} | {m['launch']:.3f} | {m['idle']:.3f} | {m['pure']:.3f} | {m['ingraph']:.3f} | "
              f"{m['read']:.3f} | {m['early']:.3f} |")


if __name__ == "__main__":
    main()
