"""What the token graphs cost at startup, on the GPU:
``python3 bench/scripts/graph_cost.py --shape qwen3-0.6b llama3-8b [--caps 0 2048]
[--modes full piecewise] [--json FILE]``.

For each shape (dummy weights), token-graph cap (``EngineConfig.piecewise_max_tokens``; 0 = no
token graphs) and mode (``EngineConfig.token_graph_mode``) it builds an engine and prints the
build time (weights, KV pool, graph captures), the number of graphs, the KV pages the pool got
and the device memory left free.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time

import torch

from twinserve.bench.offline import append_jsonl
from twinserve.engine.engine import Engine, EngineConfig
from twinserve.engine.model_maker import make_model


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", nargs="+", default=["qwen3-0.6b"])
    ap.add_argument("--caps", nargs="+", type=int, default=[0, 2048])
    ap.add_argument("--modes", nargs="+", default=["hybrid", "full", "piecewise"])
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    for shape in args.shape:
        model = str(make_model(shape, tempfile.mkdtemp(prefix="twinserve-graphs-"), weights=False))
        for cap, mode in [(c, m) for c in args.caps for m in (args.modes if c else args.modes[:1])]:
            t = time.perf_counter()
            eng = Engine(EngineConfig(model=model, load_format="dummy", piecewise_max_tokens=cap,
                                      token_graph_mode=mode))
            build_s = time.perf_counter() - t
            free, _ = torch.cuda.mem_get_info()
            tg = eng.runner.token_graphs
            row = {"shape": shape, "piecewise_max_tokens": cap, "mode": mode if cap else "none",
                   "build_s": build_s, "token_graphs": len(tg.graphs) if tg else 0,
                   "token_sizes": len(tg.sizes) if tg else 0,
                   "kv_pages": eng.pool.geom.num_pages, "free_gib": free / 2**30}
            print(f"graph cost {shape} cap={cap} {row['mode']}: build {build_s:.1f} s, {row['token_graphs']} token "
                  f"graphs ({row['token_sizes']} sizes), {row['kv_pages']} KV pages, {row['free_gib']:.2f} GiB free",
                  flush=True)
            rows.append(row)
            eng.shutdown()
            del eng, tg
            gc.collect()
            torch.cuda.empty_cache()
    append_jsonl(args.json, rows)


if __name__ == "__main__":
    main()
