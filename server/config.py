"""`ServerConfig`: the HTTP front end's knobs (the engine has its own `EngineConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from twinserve.server.probe_backoff import PROBE_FIRST_S, PROBE_MAX_S

MAX_N_LIMIT = 128  # the largest server.max_n


@dataclass(slots=True)
class ServerConfig:
    """How the server listens and protects itself.

    - ``host`` / ``port``: where uvicorn listens (``port=0``: pick a free port; the chosen one is
      reported by the launcher).
    - ``queue_limit``: most requests that may wait in the engine's queue beyond its running slots
      (the engine holds at most ``max_running + queue_limit``); a request beyond it gets 429 with
      ``Retry-After: retry_after_s``. ``None`` means unlimited.
    - ``served_model_name``: the id in ``/v1/models`` and responses (default: the model dir name).
    - ``engine_factory``: ``"module:Class"`` building the engine from its config (the seam that
      lets tests or other engines plug in; default the real twinserve engine).
    - ``stats_interval_s``: how often the engine publishes its gauges while busy.
    - ``startup_timeout_s`` / ``shutdown_timeout_s``: handshake and stop deadlines per child.
    - ``request_timeout_s``: a request still unfinished after this long fails with 504 (a safety net
      against hangs; ``None`` disables it).
    - ``engine_stall_s``: no engine heartbeat for this long turns ``/health`` to 503 and fails the
      in-flight requests with 503 (``None`` disables it); must exceed ``stats_interval_s``.
    - ``max_body_bytes``: a request body larger than this gets 413 before it is parsed.
    - ``api_key``: when set (or when ``TWINSERVE_API_KEY`` is), every ``/v1/*`` and ``/generate``
      call needs ``Authorization: Bearer <key>`` (401 otherwise).
    - ``debug``: serve ``/debug/*`` (process ids, IPC paths, engine stats); off by default.
    - ``max_n``: the largest ``n`` (outputs per request) a request may ask for (at most `MAX_N_LIMIT`).
    - ``replicas`` / ``router`` / ``router_kwargs``: how many engine workers serve behind the one
      API server, and the `twinserve.policies.routing` router the tokenizer worker picks one with
      per request (``twinserve-serve`` takes them from the run config's ``replicas``, ``router``
      and ``router_kwargs``).
    - ``replica_urls``: running servers to proxy to instead of starting an engine
      (`url_proxy.UrlProxy`, routed with ``router`` / ``router_kwargs``); None: serve an engine.
    - ``replica_probe_s`` / ``replica_probe_max_s``: a replica URL that stopped answering has its
      ``/health`` probed after ``replica_probe_s``, then after twice the previous wait each time
      the probe fails, at most ``replica_probe_max_s``; it is back in rotation once it answers 200.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    queue_limit: int | None = 1024
    served_model_name: str | None = None
    engine_factory: str = "twinserve.engine.engine:Engine"
    stats_interval_s: float = 0.1
    startup_timeout_s: float = 600.0
    shutdown_timeout_s: float = 5.0
    request_timeout_s: float | None = 3600.0
    engine_stall_s: float | None = 30.0
    max_body_bytes: int = 8 * 1024 * 1024
    retry_after_s: int = 1
    api_key: str | None = None
    debug: bool = False
    log_level: str = "warning"
    max_n: int = 16
    replicas: int = 1
    router: str = "round_robin"
    router_kwargs: dict = field(default_factory=dict)
    replica_urls: list | None = None
    replica_probe_s: float = PROBE_FIRST_S
    replica_probe_max_s: float = PROBE_MAX_S

    def validate(self) -> None:
        if not (0 <= self.port < 65536):
            raise ValueError(f"server.port must be in [0, 65535], got {self.port}")
        if self.queue_limit is not None and self.queue_limit < 1:
            raise ValueError(f"server.queue_limit must be >= 1 or null (unlimited), got {self.queue_limit}")
        if not (1 <= self.max_n <= MAX_N_LIMIT):
            raise ValueError(f"server.max_n must be in [1, {MAX_N_LIMIT}], got {self.max_n}")
        if self.request_timeout_s is not None and self.request_timeout_s <= 0:
            raise ValueError(f"server.request_timeout_s must be > 0 or null, got {self.request_timeout_s}")
        if self.engine_stall_s is not None and self.engine_stall_s <= self.stats_interval_s:
            raise ValueError(f"server.engine_stall_s must exceed server.stats_interval_s "
                             f"({self.stats_interval_s}) or be null, got {self.engine_stall_s}")
        if self.max_body_bytes < 1024:
            raise ValueError(f"server.max_body_bytes must be >= 1024, got {self.max_body_bytes}")
        if self.retry_after_s < 0:
            raise ValueError(f"server.retry_after_s must be >= 0, got {self.retry_after_s}")
        if self.replicas < 1:
            raise ValueError(f"server.replicas must be >= 1, got {self.replicas}")
        if self.replica_urls is not None and (not isinstance(self.replica_urls, list) or not self.replica_urls):
            raise ValueError(f"server.replica_urls must be a non-empty list of server URLs, e.g. "
                             f"server.replica_urls=[http://h1:8000,http://h2:8000], got {self.replica_urls}")
        if not (0 < self.replica_probe_s <= self.replica_probe_max_s):
            raise ValueError(f"server.replica_probe_s must be > 0 and <= server.replica_probe_max_s "
                             f"({self.replica_probe_max_s}), got {self.replica_probe_s}")
        if self.api_key is not None and not self.api_key:
            raise ValueError("server.api_key must not be empty (null: no key)")
