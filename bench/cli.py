"""``twinserve-bench NAME [args...]``: run one benchmark of `BENCHMARKS` with its own arguments."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Sequence

from twinserve.core.cli_errors import plain_warnings, report_user_errors, take_debug_flag


@dataclass(frozen=True, slots=True)
class Benchmark:
    """A benchmark by name: the module whose ``main(argv)`` runs it, and one line about it."""

    module: str
    about: str


BENCHMARKS: dict[str, Benchmark] = {
    "core": Benchmark("twinserve.bench.core", "schedule() + complete() per step, radix match + insert, trace load"),
    "workload": Benchmark("twinserve.bench.workload", "workload loading, prompt tokens, metrics tables"),
    "sim": Benchmark("twinserve.bench.simulator", "simulator speed and memory: the Azure conv trace, 1k-100k requests"),
    "http-overhead": Benchmark("twinserve.bench.http_overhead",
                               "HTTP serving against in-process serving (needs the engine and server extras)"),
    "burst-ingest": Benchmark("twinserve.bench.burst_ingest",
                              "how long a burst of concurrent HTTP requests takes to reach the engine"),
    "sbs": Benchmark("twinserve.bench.sbs", "mini-sglang and twinserve side by side on one GPU (docs/side_by_side.md)"),
    "recipe-floor": Benchmark("twinserve.bench.recipe_floor",
                              "the side-by-side recipe's KV bytes and GEMM FLOPs, and the fastest run at given rates"),
    "step-kernels": Benchmark("twinserve.bench.step_kernels",
                              "decode, mixed-step and prefill attention, KV store and sampling kernels by variant (CUDA)"),
    "spec": Benchmark("twinserve.bench.spec", "speculative decoding (ngram, draft=layers:N) against plain decoding"),
    "overlap": Benchmark("twinserve.bench.overlap",
                         "a decode step's attention beside its matrix products: two half batches on two streams (CUDA)"),
    "gemm-shapes": Benchmark("twinserve.bench.gemm_shapes", "cuBLAS time of a model's projections by token count (CUDA)"),
    "offline": Benchmark("twinserve.bench.offline",
                         "engine offline throughput (mini-sglang's recipe) and decode steps against the bandwidth bound"),
    "host-steps": Benchmark("twinserve.bench.host_steps", "the engine's host cost of fixed mixed and decode step shapes"),
    "cpu-speed": Benchmark("twinserve.bench.cpu_speed", "how fast each vCPU runs pure Python now, and how often"),
    "clock-drift": Benchmark("twinserve.bench.clock_drift",
                             "how far the GPU's event clock drifts from the host's, as the step records read them"),
}


def usage() -> str:
    width = max(map(len, BENCHMARKS))
    lines = ["usage: twinserve-bench NAME [args...]   (twinserve-bench NAME --help for its arguments)", ""]
    lines += [f"  {name:<{width}}  {b.about}" for name, b in BENCHMARKS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Run benchmark ``argv[0]`` with the rest of ``argv``; a `UserError` it raises is one line
    on stderr and exit status 2 (``--debug`` or ``TWINSERVE_DEBUG=1``: its traceback)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = take_debug_flag(args)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return
    name, rest = args[0], args[1:]
    if name not in BENCHMARKS:
        raise SystemExit(f"twinserve-bench: unknown benchmark {name!r}\n\n{usage()}")
    if argv is None:
        plain_warnings()
    module = importlib.import_module(BENCHMARKS[name].module)
    report_user_errors(f"twinserve-bench {name}", debug, lambda: module.main(rest))


if __name__ == "__main__":
    main()
