"""Side-by-side offline throughput of mini-sglang and twinserve on one GPU, in one command.

    python -m twinserve.bench.sbs --model llama3-8b --temperature 0 --runs 2 --passes 2 \
        --minisgl .ab/minisgl-python --profile --out OUT

Both engines serve mini-sglang's offline recipe (`bench.recipe`: 256 requests, prompt and
output lengths uniform in [100, 1024], random weights, ignore_eos) with a step budget of 16,384
tokens; twinserve's ``LLM`` schedules them by its offline default, ``makespan``. Each pass
starts each engine in its own process (mini-sglang first, then twinserve, so
the engines alternate), warms it up with an untimed run, then times ``--runs`` runs whose
seeds are the same for both engines and new for every run (no run can hit a prefix another run
cached). ``--profile`` adds, in the last pass, one run of each engine under torch.profiler and a
table of CUDA kernel time by family (`bench.kernel_families`), idle gaps included.
``--variant NAME:key=value,...`` adds a twinserve engine with EngineConfig overrides
(``scheduler.key`` for scheduler fields; ``env.VAR=value`` sets an environment variable of that
engine's process instead). A shape name's config and tokenizer go to the
temporary folder. Writes ``OUT/sbs.md`` (the tables), ``OUT/runs.csv``
(one row per timed run) and ``OUT/profile-ENGINE.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from twinserve.bench.kernel_families import Profile, family_table, top_kernels


@dataclass
class EngineSpec:
    """One contender: a label, the worker's engine kind, its override arguments and the
    environment variables its process gets (besides this one's)."""

    label: str
    kind: str
    sets: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def parse_variant(text: str) -> EngineSpec:
    name, _, rest = text.partition(":")
    if not name or not rest:
        raise SystemExit(f"--variant wants NAME:key=value[,key=value...], got {text!r}")
    pairs = [kv for kv in rest.split(",") if kv]
    env = dict(kv[len("env."):].split("=", 1) for kv in pairs if kv.startswith("env.") and "=" in kv)
    return EngineSpec(name, "tw", [kv for kv in pairs if not kv.startswith("env.")], env)


def model_dir(model: str, out: Path) -> str:
    """A checkpoint folder: ``model`` itself if it is one, else config and tokenizer of the
    named shape (random weights), written under ``out``."""
    if Path(model, "config.json").exists():
        return model
    from twinserve.engine.model_maker import make_model

    return str(make_model(model, out / f"twinserve-sbs-{model}", weights=False))


def run_worker(spec: EngineSpec, args: argparse.Namespace, mdir: str, seeds: list[int],
               profile: Path | None, log: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "twinserve.bench.sbs_worker", spec.kind, mdir, "--temperature", str(args.temperature),
           "--num-requests", str(args.num_requests),
           "--warmup-requests", str(args.warmup_requests), "--lens", *map(str, args.lens), "--label", spec.label, "--seeds", *map(str, seeds)]
    if spec.kind == "ms" and args.minisgl:
        cmd += ["--minisgl", str(Path(args.minisgl).resolve())]
    if profile is not None:
        cmd += ["--profile-seed", "999", "--profile-out", str(profile)]
    if spec.sets:
        cmd += ["--set", *spec.sets]
    t = time.perf_counter()
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, timeout=args.worker_timeout_s,
                               env={**os.environ, **spec.env})
            out, rc = p.stdout, p.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
        f.write(out)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    print(f"[{spec.label}] rc={rc} in {time.perf_counter() - t:.0f} s: "
          + "; ".join(f"{r['event']} {r.get('tok_s', r.get('setup_s', ''))}" for r in rows), flush=True)
    return rows


def throughput_table(runs: list[dict], labels: list[str]) -> str:
    med = {lab: statistics.median([r["tok_s"] for r in runs if r["engine"] == lab] or [float("nan")])
           for lab in labels}
    ref = "mini-sglang" if "mini-sglang" in med else labels[0]
    base = med[ref]
    rows = [f"| engine | output tok/s of each timed run | median | vs {ref} |", "|---|---|---|---|"]
    for lab in labels:
        each = " / ".join(f"{r['tok_s']:,.0f}" for r in runs if r["engine"] == lab)
        rows.append(f"| {lab} | {each} | {med[lab]:,.0f} | {med[lab] / base:.2f}x |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3-8b", help="shape name (random weights) or checkpoint folder")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--runs", type=int, default=2, help="timed runs per engine and pass")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--num-requests", type=int, default=256)
    ap.add_argument("--warmup-requests", type=int, default=64)
    ap.add_argument("--lens", type=int, nargs=2, default=[100, 1024], metavar=("LO", "HI"),
                    help="prompt and output lengths are uniform in [LO, HI] (the recipe's: 100 1024)")
    ap.add_argument("--minisgl", default=os.environ.get("MINISGL_PATH"),
                    help="folder holding mini-sglang's python package (minisgl/)")
    ap.add_argument("--no-minisgl", action="store_true", help="twinserve variants only")
    ap.add_argument("--variant", action="append", default=[], help="NAME:key=value,... (a twinserve variant)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--worker-timeout-s", type=float, default=400)
    ap.add_argument("--out", required=True)
    ap.add_argument("--report-only", metavar="TITLE", default=None,
                    help="rebuild OUT's report from its workers.log and profiles (a run that ended early)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.report_only is not None:
        print(report_from(out, args.report_only))
        return
    out.mkdir(parents=True, exist_ok=True)
    specs = ([] if args.no_minisgl else [EngineSpec("mini-sglang", "ms")]) + [EngineSpec("twinserve", "tw")]
    specs += [parse_variant(v) for v in args.variant]
    mdir = model_dir(args.model, Path(tempfile.gettempdir()))
    runs: list[dict] = []
    profiles: list[Profile] = []
    for p in range(args.passes):
        seeds = [p * args.runs + k for k in range(args.runs)]
        last = p == args.passes - 1
        for spec in specs:
            prof = out / f"profile-{spec.label}.json" if args.profile and last else None
            rows = run_worker(spec, args, mdir, seeds, prof, out / "workers.log")
            runs += [dict(r, **{"pass": p}) for r in rows if r["event"] == "run"]
            if prof is not None and prof.exists():
                profiles.append(Profile.from_dict(json.loads(prof.read_text())))
    title = (f"# Side by side: {args.model}, temperature {args.temperature}\n\n"
             f"{args.num_requests} requests a run, {args.runs} timed runs x {args.passes} passes per engine, "
             f"engines alternating; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(write_report(out, title, runs, [s.label for s in specs], profiles))


def write_report(out: Path, title: str, runs: list[dict], labels: list[str], profiles: list[Profile]) -> str:
    """Write ``out/sbs.md`` (throughput, kernel families, top kernels) and ``out/runs.csv``;
    return the Markdown."""
    parts = [title, "", throughput_table(runs, labels)]
    if profiles:
        parts += ["", "CUDA kernel time of one profiled run each (seed 999):", "", family_table(profiles)]
        for pr in profiles:
            parts += ["", top_kernels(pr)]
    text = "\n".join(parts) + "\n"
    (out / "sbs.md").write_text(text)
    if runs:
        keys = sorted({k for r in runs for k in r})
        with open(out / "runs.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(runs)
    return text


def report_from(out: Path, title: str) -> str:
    """The report of a run folder whose command ended early: the workers' JSON lines in
    ``workers.log`` and whatever profiles were written."""
    runs, labels = [], []
    for line in (out / "workers.log").read_text().splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            if r["engine"] not in labels:
                labels.append(r["engine"])
            if r["event"] == "run":
                runs.append(r)
    profiles = [Profile.from_dict(json.loads((out / f"profile-{lab}.json").read_text()))
                for lab in labels if (out / f"profile-{lab}.json").exists()]
    return write_report(out, title, runs, labels, profiles)


if __name__ == "__main__":
    main()
