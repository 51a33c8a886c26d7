"""What the piecewise CUDA graphs cost at startup, on the GPU:
``python3 engine/scripts/graph_cost.py --shape qwen3-0.6b llama3-8b [--caps 0 2048] [--json FILE]``.

For each shape (dummy weights) and piecewise cap (``EngineConfig.piecewise_max_tokens``; 0 = no
piecewise graphs) it builds an engine and prints the build time (weights, KV pool, graph
captures), the number of graphs, the KV pages the pool got and the device memory left free.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time

import torch

from twinserve.engine.bench import append_jsonl
from twinserve.engine.engine import Engine, EngineConfig
from twinserve.engine.model_maker import make_model


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", nargs="+", default=["qwen3-0.6b"])
    ap.add_argument("--caps", nargs="+", type=int, default=[0, 2048])
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    for shape in args.shape:
        model = str(make_model(shape, tempfile.mkdtemp(prefix="twinserve-graphs-"), weights=False))
        for cap in args.caps:
            t = time.perf_counter()
            eng = Engine(EngineConfig(model=model, load_format="dummy", piecewise_max_tokens=cap))
            build_s = time.perf_counter() - t
            free, _ = torch.cuda.mem_get_info()
            pieces = eng.runner.pieces
            row = {"shape": shape, "piecewise_max_tokens": cap, "build_s": build_s,
                   "piecewise_graphs": len(pieces.graphs) if pieces else 0,
                   "piecewise_sizes": len(pieces.sizes) if pieces else 0,
                   "kv_pages": eng.pool.geom.num_pages, "free_gib": free / 2**30}
            print(f"graph cost {shape} cap={cap}: build {build_s:.1f} s, {row['piecewise_graphs']} piecewise graphs "
                  f"({row['piecewise_sizes']} sizes), {row['kv_pages']} KV pages, {row['free_gib']:.2f} GiB free",
                  flush=True)
            rows.append(row)
            eng.shutdown()
            del eng, pieces
            gc.collect()
            torch.cuda.empty_cache()
    append_jsonl(args.json, rows)


if __name__ == "__main__":
    main()
