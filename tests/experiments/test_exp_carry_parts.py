"""`experiments/scripts/carry_parts.sh`: a file split into carry-sized part folders joins back
byte for byte, and a missing part is an error, not a short file."""

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "scripts" / "carry_parts.sh"


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True)


def test_split_then_join_gives_the_file_back(tmp_path: Path) -> None:
    data = os.urandom(5 * 1024 * 1024 + 123)
    (tmp_path / "model.whl").write_bytes(data)
    split = run(tmp_path, "split", "model.whl", "2")
    assert split.returncode == 0, split.stderr
    parts = sorted(p.name for p in (tmp_path / ".carry").glob("p*"))
    assert parts == ["p1", "p2", "p3"]
    assert all((tmp_path / ".carry" / p / "manifest").is_file() for p in parts)
    joined = run(tmp_path, "join", "wheels")
    assert joined.returncode == 0, joined.stderr
    assert (tmp_path / "wheels" / "model.whl").read_bytes() == data


def test_a_missing_or_damaged_part_fails(tmp_path: Path) -> None:
    (tmp_path / "f.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    assert run(tmp_path, "split", "f.bin", "1").returncode == 0
    part = tmp_path / ".carry" / "p2" / "part"
    part.write_bytes(b"x" + part.read_bytes()[1:])
    damaged = run(tmp_path, "join", "out")
    assert damaged.returncode == 1 and "sha256" in damaged.stderr
    part.unlink()
    missing = run(tmp_path, "join", "out")
    assert missing.returncode == 1 and ".carry/p2 is missing" in missing.stderr
