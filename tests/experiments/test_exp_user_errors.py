"""A user's mistakes on the command line: `twinserve-run` and `twinserve-serve` print one or two
lines naming the key, the value and what is allowed, exit 2, and show no traceback (``--debug``
or ``TWINSERVE_DEBUG=1`` does). Each case runs the console entry point in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from twinserve.core.conf_path import conf_dir
from twinserve.core.model_shapes import get_shape

RUN = [sys.executable, "-m", "twinserve.experiments.app"]
SERVE = [sys.executable, "-m", "twinserve.server.launch"]
SMALL = ["workload.num_requests=20", "progress=false"]
# The entry point with torch made unimportable (sys.modules[name] = None: import fails, find_spec
# finds nothing), as on a machine where it is not installed.
NO_TORCH = ("import sys, runpy; sys.modules['torch'] = None; sys.argv = [{prog!r}] + sys.argv[1:]; "
            "runpy.run_module({module!r}, run_name='__main__')")


def run(cmd: list[str], *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TWINSERVE_DEBUG": "", **(env or {})})


def user_error(cmd: list[str], *args: str, cwd: Path) -> str:
    """stderr of a run that must fail as a user error: exit 2, no traceback, at most three lines
    (the message, which may wrap once, and the --debug hint)."""
    p = run(cmd, *args, f"hydra.run.dir={cwd / 'out'}", cwd=cwd) if cmd is RUN else run(cmd, *args, cwd=cwd)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("[twinserve]")]
    assert 1 <= len(lines) <= 3 and "error:" in lines[0], p.stderr
    return p.stderr


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    head = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
    (d / "wrong_columns.csv").write_text("time,prompt,output\n0,10,5\n")
    (d / "non_numeric.csv").write_text(head + "0,10,5\n1,12,5\n2,lots,5\n")
    (d / "empty.csv").write_text("")
    (d / "quoting.csv").write_text(head + '0,10,5\n1,"12,5\n2,3,4\n')
    return d


def test_a_missing_file_names_the_key_and_the_path(tmp_path: Path) -> None:
    err = user_error(RUN, "workload=csv", f"workload.path={tmp_path}/nope.csv", cwd=tmp_path)
    assert f"workload.path={tmp_path}/nope.csv" in err and "no such file" in err
    err = user_error(RUN, f"model.path={tmp_path}/no_model", *SMALL, cwd=tmp_path)
    assert f"model.path={tmp_path}/no_model" in err and "config.json" in err


def test_a_mandatory_key_left_unset(tmp_path: Path) -> None:
    err = user_error(RUN, "workload=mooncake", cwd=tmp_path)
    assert "workload.path is mandatory" in err and "workload.path=VALUE" in err


@pytest.mark.parametrize("override, known", [
    ("scheduler.name=nope", "fcfs, lpm, makespan, priority, sjf, vtc"),
    ("router=nope", "least_loaded, prefix_affinity, round_robin"),
    ("workload.name=nope", "azure_code, azure_conv"),
    ("cost_model.name=nope", "auto, calibrated, constant, roofline"),
    ("hardware.name=nope", "cpu, h100, h200"),
    ("memory.name=nope", "on_demand"),
    ("model.name=nope", "llama3-8b"),
])
def test_an_unknown_name_lists_the_known_ones(override: str, known: str, tmp_path: Path) -> None:
    err = user_error(RUN, override, "replicas=2", *SMALL, cwd=tmp_path)
    assert override in err and "known: " in err and known in err


def test_an_unknown_group_option_lists_the_options(tmp_path: Path) -> None:
    err = user_error(RUN, "scheduler=nope", cwd=tmp_path)
    assert "scheduler=nope" in err and "known: fcfs, lpm, makespan, priority, sjf, vtc" in err and "_knobs" not in err
    err = user_error(RUN, "-m", "cache=radix,nope", cwd=tmp_path)  # each value of a sweep
    assert "cache=nope" in err and "known: none, radix" in err
    err = user_error(SERVE, "scheduler=nope", cwd=tmp_path)
    assert "scheduler=nope" in err


@pytest.mark.parametrize("override, says", [
    ("kv.mem_fracton=0.5", "Key 'mem_fracton' not in 'KvNode'"),
    ("backend.fast_forwrd=false", "Key 'fast_forwrd' not in 'SimBackendNode'"),
    ("tp=two", "tp=two: Value 'two' of type 'str' could not be converted to Integer"),
    ("spec.num_tokens=many", "spec.num_tokens=many"),
    ("backend.pipeline=maybe", "'maybe' is not a valid bool"),
])
def test_a_typo_or_a_wrong_type_fails_at_composition(override: str, says: str, tmp_path: Path) -> None:
    err = user_error(RUN, override, *SMALL, cwd=tmp_path)
    assert says in err, err
    assert not (tmp_path / "out").exists()
    err = user_error(RUN, "-m", "tp=1,two", cwd=tmp_path)  # each value of a sweep
    assert "tp=two" in err


def test_a_typo_in_a_conf_file_fails_at_composition(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(conf_dir(), conf)
    text = (conf / "config.yaml").read_text()
    (conf / "config.yaml").write_text(text.replace("  dtype_bytes: null", "  dtype_byte: null"))
    err = user_error(RUN, "-cp", str(conf), *SMALL, cwd=tmp_path)
    assert "Key 'dtype_byte' not in 'KvNode'" in err, err


@pytest.mark.parametrize("name, expected", [
    ("wrong_columns.csv", ["no column arrived_at", "its columns: time, prompt, output"]),
    ("non_numeric.csv", ["line 4", "column num_prefill_tokens", "'lots' is not a number"]),
    ("empty.csv", ["the file is empty"]),
    ("quoting.csv", ["not a readable CSV", "quoting"]),
])
def test_a_broken_csv_names_the_file_and_the_row(name: str, expected: list[str], traces: Path,
                                                 tmp_path: Path) -> None:
    err = user_error(RUN, "workload=csv", f"workload.path={traces / name}", cwd=tmp_path)
    assert str(traces / name) in err
    for text in expected:
        assert text in err, (text, err)


def test_a_kv_pool_too_small_for_any_request(tmp_path: Path) -> None:
    err = user_error(RUN, "kv.num_pages=2", *SMALL, cwd=tmp_path)
    assert "kv.num_pages=2" in err and "allowed: kv.num_pages >=" in err
    assert not (tmp_path / "out" / "summary.json").exists()  # no summary of nan metrics


@pytest.mark.parametrize("limit, says", [("0", "must be >= 1"), ("100", "drops all 20 requests")])
def test_a_max_prompt_tokens_that_leaves_nothing(limit: str, says: str, tmp_path: Path) -> None:
    err = user_error(RUN, "workload=mooncake_conv", f"workload.max_prompt_tokens={limit}", *SMALL, cwd=tmp_path)
    assert "workload.max_prompt_tokens" in err and says in err


@pytest.mark.parametrize("overrides, says", [
    (["scheduler.page_size=0"], "scheduler.page_size=0: allowed: a number >= 1, or null"),
    (["kv.mem_fraction=1.5"], "kv.mem_fraction=1.5: allowed: a number > 0 and <= 1"),
    (["workload=shared_prefix", "workload.prefix_len=-5"],
     "workload=shared_prefix cannot be built from workload.num_requests=20"),
    (["model=llama3-70b", "hardware=h100"], "leaves no KV memory on h100"),
])
def test_a_value_out_of_range_is_refused_before_anything_runs(overrides: list[str], says: str,
                                                              tmp_path: Path) -> None:
    err = user_error(RUN, *overrides, *SMALL, cwd=tmp_path)
    assert says in err


def test_tp_that_does_not_divide_the_heads(tmp_path: Path) -> None:
    err = user_error(RUN, "tp=3", *SMALL, cwd=tmp_path)
    assert "tp=3" in err and "32 attention heads and 8 KV heads" in err and "allowed: tp in [1, 2, 4, 8" in err


def test_several_replicas_on_a_one_replica_backend(tmp_path: Path) -> None:
    err = user_error(RUN, "backend=server", "replicas=2", "model=tiny-llama", *SMALL, cwd=tmp_path)
    assert "replicas=2" in err and "backend=server runs one replica" in err and "backend=engine|sim" in err


@pytest.mark.parametrize("backend", ["engine", "server"])
def test_an_engine_backend_without_torch_names_the_extra(backend: str, tmp_path: Path) -> None:
    no_torch = [sys.executable, "-c", NO_TORCH.format(prog="twinserve-run", module="twinserve.experiments.app")]
    p = run(no_torch, f"backend={backend}", "model=tiny-llama", *SMALL, f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"backend={backend} needs torch" in p.stderr and "install the 'engine' extra" in p.stderr
    assert "pip install torch==2.13.0" in p.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    args = ("workload=csv", f"workload.path={tmp_path}/nope.csv", f"hydra.run.dir={tmp_path}")
    for p in (run(RUN, *args, "--debug", cwd=tmp_path), run(RUN, *args, cwd=tmp_path, env={"TWINSERVE_DEBUG": "1"})):
        assert p.returncode != 0 and "Traceback" in p.stderr and "UserError" in p.stderr


def test_serve_reports_the_same_mistakes(tmp_path: Path) -> None:
    err = user_error(SERVE, cwd=tmp_path)
    assert "needs model.path=DIR" in err
    err = user_error(SERVE, f"model.path={tmp_path}/no_model", cwd=tmp_path)
    assert f"model.path={tmp_path}/no_model" in err and "no such file" in err
    err = user_error(SERVE, f"model.path={tmp_path}", "scheduler.name=nope", cwd=tmp_path)
    assert "scheduler.name=nope" in err and "known: fcfs" in err
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(get_shape("tiny-llama").to_hf_config()))
    err = user_error(SERVE, f"model.path={model}", "tp=3", cwd=tmp_path)
    assert "tp=3" in err and "allowed: tp in" in err
    err = user_error(SERVE, f"model.path={model}", "replicas=2", "router=nope", cwd=tmp_path)
    assert "router=nope" in err and "known: cache_aware" in err
    err = user_error(SERVE, f"model.path={model}", "server.nope=1", cwd=tmp_path)
    assert "unknown server keys ['nope']" in err
    err = user_error(SERVE, f"model.path={model}", "server.port=http", cwd=tmp_path)
    assert "server.port=http: Value 'http' of type 'str' could not be converted to Integer" in err
    err = user_error(SERVE, f"model.path={model}", "kv.mem_fraction=0", cwd=tmp_path)
    assert "kv.mem_fraction=0.0: allowed: a number > 0 and <= 1" in err
    err = user_error(SERVE, f"model.path={model}", cwd=tmp_path)
    assert f"model.path={model}: the directory has no tokenizer.json" in err
    (model / "tokenizer.json").write_text("{}")
    err = user_error(SERVE, f"model.path={model}", cwd=tmp_path)
    assert "holds no weights (*.safetensors)" in err and "backend.load_format=dummy" in err
    err = user_error(SERVE, f"model.path={model}", "kv.mem_fracton=0.5", cwd=tmp_path)
    assert "Key 'mem_fracton' not in 'KvNode'" in err
    no_torch = [sys.executable, "-c", NO_TORCH.format(prog="twinserve-serve", module="twinserve.server.launch")]
    p = run(no_torch, f"model.path={model}", cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "install the 'engine,server' extras" in p.stderr


def test_serve_reports_a_workers_user_error_in_one_line(tmp_path: Path) -> None:
    """The engine worker finds the mistake (cuda on a torch without CUDA): the launcher prints
    its one line, naming the worker, and no traceback."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a torch without a CUDA device")
    from twinserve.engine.model_maker import make_model

    model = make_model("tiny-llama", tmp_path / "tiny", weights=False)
    err = user_error(SERVE, f"model.path={model}", "backend.load_format=dummy", "backend.device=cuda",
                     "server.port=0", cwd=tmp_path)
    assert "error: engine0: device=cuda:0, but this torch" in err and "sees no CUDA device" in err


# ---- item: no silent wrong answer ----------------------------------------------------------
def _model_dir(d: Path, shape) -> Path:
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(shape.to_hf_config()))
    return d


def test_a_model_path_of_a_known_shape_takes_that_shapes_calibration(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "q06", get_shape("qwen3-0.6b"))
    p = run(RUN, f"model.path={model}", *SMALL, f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    r = json.loads((tmp_path / "out" / "summary.json").read_text())["run"]
    assert r["model"] == "qwen3-0.6b" and r["cost_model"]["name"] == "calibrated"
    assert Path(r["calibration"]).name == "h200_qwen3-0.6b_tp1.json"
    assert r["calibration_mismatch"].startswith(f"model.path={model} is not model.name=llama3-8b")
    assert "CalibrationMismatchWarning" in p.stderr and "runs as qwen3-0.6b" in p.stderr
    assert "[twinserve] sim: qwen3-0.6b on h200" in p.stdout and "cost model calibrated (h200_qwen3-0.6b_tp1.json)" in p.stdout


def test_a_model_path_without_a_calibration_falls_back_to_roofline(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "odd", replace(get_shape("llama3-8b"), num_layers=7))
    p = run(RUN, f"model.path={model}", *SMALL, f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    r = json.loads((tmp_path / "out" / "summary.json").read_text())["run"]
    assert (r["model"], r["cost_model"]["name"], r["calibration"]) == ("odd", "roofline", None)
    assert "num_layers 7 vs 32" in r["calibration_mismatch"] and "roofline" in r["calibration_mismatch"]
    assert p.stderr.count("CalibrationMismatchWarning") == 1
    assert "cost model roofline" in p.stdout


def test_the_matching_model_path_has_no_mismatch(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "l8", get_shape("llama3-8b"))
    p = run(RUN, f"model.path={model}", *SMALL, f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    r = json.loads((tmp_path / "out" / "summary.json").read_text())["run"]
    assert r["model"] == "llama3-8b" and r["calibration_mismatch"] is None
    assert Path(r["calibration"]).name == "h200_llama3-8b_tp1.json"


def test_mooncake_hash_ids_of_another_block_size_warn_once(tmp_path: Path) -> None:
    from twinserve.core.workload.loaders import load_mooncake

    rows = [{"timestamp": 100 * i, "input_length": 1000 + 7 * i, "output_length": 10,
             "hash_ids": list(range(-(-(1000 + 7 * i) // 64)))} for i in range(30)]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.warns(UserWarning) as seen:
        load_mooncake(path, block_size=512)
    msgs = [str(w.message) for w in seen if "hash_ids" in str(w.message)]
    assert len(msgs) == 1 and "30 of 30" in msgs[0] and "block_size=64" in msgs[0]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_mooncake(path, block_size=64)  # the right block size: no warning


def test_an_engine_run_on_cpu_says_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    p = run(RUN, "backend=engine", "model=tiny-llama", "backend.device=cpu", "workload=poisson",
            "workload.num_requests=3", "workload.prompt_len.mean=16", "workload.prompt_len.max=32",
            "workload.output_len.mean=4", "workload.output_len.max=8", "backend.warmup=false",
            "progress=false", f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads((tmp_path / "out" / "summary.json").read_text())["run"]
    assert r["hardware"] == "cpu" and r["cost_model"] is None and r["calibration"] is None
    assert "[twinserve] engine: tiny-llama on cpu" in p.stdout and "measured (no cost model)" in p.stdout
    assert "engine: tiny-llama on cpu" in p.stdout.splitlines()[1]
