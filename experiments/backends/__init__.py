"""Backends of the experiment app (registry `BACKENDS`): sim, engine, server."""

from twinserve.experiments.backends import engine, server, sim  # noqa: F401  (registers)
from twinserve.experiments.backends.base import BACKENDS, Backend, BackendResult, RunContext

__all__ = ["BACKENDS", "Backend", "BackendResult", "RunContext"]
