"""`twinserve-run --help`: what the app does, each config group's options and the top-level keys,
read from the config tree itself (so the text lists what is there)."""

from __future__ import annotations

import re
from pathlib import Path

ABOUT = """\
twinserve-run: run one workload through one serving backend and write requests.parquet,
steps.parquet and summary.json into the run folder (outputs/DATE/TIME/ unless hydra.run.dir=DIR).
The default run simulates the bundled Azure conversation trace on a calibrated H200 model.

usage: twinserve-run [GROUP=OPTION ...] [KEY=VALUE ...] [-m] [--debug]
  GROUP=OPTION   pick an option of a config group (scheduler=lpm, workload=mooncake)
  KEY=VALUE      set any key of the composed config (workload.num_requests=500, kv.num_pages=4096)
  -m             sweep: comma-separated values run as parallel jobs (scheduler=fcfs,lpm)
  --debug        show the traceback of a configuration error (also TWINSERVE_DEBUG=1)
  --cfg job      print the composed config and exit; --hydra-help: Hydra's own options"""

_KEY = re.compile(r"^([A-Za-z_][\w]*):\s*([^#]*?)\s*(?:#\s*(.*))?$")


def _first_comment(path: Path) -> str:
    for line in path.read_text().splitlines():
        text = line.lstrip("# ").strip()
        if line.startswith("#") and not text.startswith("@"):  # not a `# @package` directive
            return text
        if line.strip() and not line.startswith("#"):
            break
    return ""


def group_lines(conf: Path) -> list[str]:
    """One line per option of each group: ``  group=option  first comment line``. Groups and
    options whose names start with ``_`` (shared fragments) and Hydra's own are left out."""
    lines = []
    for group in sorted(p for p in conf.iterdir() if p.is_dir() and not p.name.startswith(("_", "hydra"))):
        lines.append(f"{group.name}:")
        for opt in sorted(group.glob("*.yaml")):
            if opt.stem.startswith("_"):
                continue
            lines.append(f"  {group.name + '=' + opt.stem:<26} {_first_comment(opt)}".rstrip())
    return lines


def key_lines(config_yaml: Path) -> list[str]:
    """The top-level scalar keys of the main config with their default and comment."""
    out = []
    for line in config_yaml.read_text().splitlines():
        m = _KEY.match(line)
        if m and m.group(2) and m.group(1) not in ("defaults", "hydra"):
            out.append(f"  {m.group(1) + '=' + m.group(2):<26} {m.group(3) or ''}".rstrip())
    return out


def help_text(conf: Path) -> str:
    return "\n".join([ABOUT, "", "config groups (default in conf/config.yaml's defaults list):",
                      *group_lines(conf), "", "top-level keys (default shown):",
                      *key_lines(conf / "config.yaml"), "",
                      "each group's own keys: twinserve-run GROUP=OPTION --cfg job"])
