"""Starting a server: `start_server` (a Python handle, used by tests and benchmarks) and `main`
(the ``twinserve-serve`` console script, configured by the experiments' Hydra tree).

``twinserve-serve model.path=DIR server.port=8000 scheduler=lpm cache=radix`` composes the same
config tree as ``twinserve-run`` and serves in the foreground until Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from twinserve.server.config import ServerConfig


@dataclass
class ServerHandle:
    """A server running in a child process (``python -m twinserve.server.serve``).

    ``children`` maps "engine0", "tokenizer0", "detokenizer0" to pids; ``stop()`` sends SIGTERM,
    waits, and SIGKILLs the whole tree as a last resort. Usable as a context manager.
    """

    url: str
    port: int
    pid: int
    children: dict[str, int]
    ipc_dir: str
    process: subprocess.Popen
    log_path: str
    _tmp: str = field(repr=False, default="")

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        """The server's stdout/stderr so far ("" once a clean stop removed it)."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> int:
        """Stop the server (SIGTERM); returns its exit code. After a clean exit the handle's temp
        files (spec, ready file, and the log unless the caller chose its path) are removed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                for pid in self.children.values():
                    _kill(pid)
                self.process.kill()
                self.process.wait(10)
        code = int(self.process.returncode)
        if code == 0 and self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
        return code

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start_server(engine_cfg: Any, host: str = "127.0.0.1", port: int = 0,
                 server_cfg: ServerConfig | None = None, timeout_s: float = 300.0,
                 env: dict[str, str] | None = None, log_path: str | None = None,
                 **server_kwargs: Any) -> ServerHandle:
    """Start a server in a child process and return once ``/health`` answers 200.

    ``engine_cfg`` is whatever the engine factory takes (an `EngineConfig`); ``server_kwargs``
    override `ServerConfig` fields (``queue_limit=4``, ...). ``port=0`` picks a free port.
    Raises ``RuntimeError`` with the server's log if it dies or is not ready in ``timeout_s``.
    """
    cfg = dataclasses.replace(server_cfg or ServerConfig(), host=host, port=port, **server_kwargs)
    cfg.validate()
    tmp = tempfile.mkdtemp(prefix="twinserve-server-")
    spec, ready = os.path.join(tmp, "spec.pkl"), os.path.join(tmp, "ready.json")
    with open(spec, "wb") as f:
        pickle.dump((engine_cfg, cfg), f)
    log_path = log_path or os.path.join(tmp, "server.log")
    full_env = {**os.environ, **(env or {})}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "twinserve.server.serve", spec, ready],
                                stdout=log, stderr=subprocess.STDOUT, env=full_env)

    def fail(why: str) -> RuntimeError:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        with open(log_path, errors="replace") as f:
            return RuntimeError(f"server {why}; log:\n{f.read()[-6000:]}")

    deadline = time.monotonic() + timeout_s
    while not os.path.exists(ready):
        if proc.poll() is not None:
            raise fail(f"exited with code {proc.returncode} during startup")
        if time.monotonic() > deadline:
            raise fail(f"not ready after {timeout_s:.0f} s")
        time.sleep(0.05)
    with open(ready) as f:
        info = json.load(f)
    handle = ServerHandle(info["url"], info["port"], info["pid"], info["children"], info["ipc_dir"],
                          proc, log_path, tmp)
    while True:
        try:
            if httpx.get(f"{handle.url}/health", timeout=2.0).status_code == 200:
                return handle
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise fail(f"exited with code {proc.returncode} during startup")
        if time.monotonic() > deadline:
            raise fail(f"/health not OK after {timeout_s:.0f} s")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> None:
    """``twinserve-serve [hydra overrides...]``: compose the experiments config, serve."""
    from twinserve.core.cli_errors import DEBUG_ENV, plain_warnings, report_user_errors, take_debug_flag
    from twinserve.server.hydra_config import compose_server_config
    from twinserve.server.runtime import serve

    overrides = list(sys.argv[1:] if argv is None else argv)
    debug = take_debug_flag(overrides)
    if debug:
        os.environ[DEBUG_ENV] = "1"  # the workers print a user error's traceback too
    plain_warnings()
    engine_cfg, server_cfg = report_user_errors("twinserve-serve", debug,
                                                lambda: compose_server_config(overrides))
    if server_cfg.replica_urls is not None:
        from twinserve.server.url_proxy import run_proxy

        run_proxy(server_cfg)
        return
    try:
        report_user_errors("twinserve-serve", debug, lambda: serve(engine_cfg, server_cfg))
    except SystemExit as e:
        if e.code not in (None, 0, 128 + signal.SIGTERM, 128 + signal.SIGINT):
            raise


if __name__ == "__main__":
    main()
