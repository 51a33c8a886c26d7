"""How the console scripts report a `UserError`: its message on stderr, exit status 2, no
traceback, unless ``--debug`` is on the command line or ``TWINSERVE_DEBUG=1`` is set; and
warnings as one line each (`plain_warnings`)."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from typing import TypeVar

from twinserve.core.errors import UserError

T = TypeVar("T")
DEBUG_FLAG = "--debug"
DEBUG_ENV = "TWINSERVE_DEBUG"
EXIT_USER_ERROR = 2


def take_debug_flag(argv: list[str]) -> bool:
    """Remove ``--debug`` from ``argv`` (in place); True when it was there or the env var is set."""
    flag = DEBUG_FLAG in argv
    while DEBUG_FLAG in argv:
        argv.remove(DEBUG_FLAG)
    return flag or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes")


def report_user_errors(prog: str, debug: bool, fn: Callable[[], T]) -> T:
    """``fn()``; a `UserError` it raises becomes ``prog: error: MESSAGE`` on stderr and
    ``SystemExit(2)`` (with ``debug``, the error propagates with its traceback)."""
    try:
        return fn()
    except UserError as e:
        if debug:
            raise
        print(f"{prog}: error: {e}", file=sys.stderr)
        print(f"({DEBUG_FLAG} or {DEBUG_ENV}=1 shows the traceback)", file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR) from None


def _one_line(message: Warning | str, category: type[Warning], *_: object, **__: object) -> str:
    return f"[twinserve] {category.__name__}: {message}\n"


def plain_warnings() -> None:
    """Print warnings as ``[twinserve] Category: message`` (no source line); for console
    scripts only, as it sets the process's `warnings.formatwarning`."""
    warnings.formatwarning = _one_line
