"""User-facing errors: a mistake in a run's configuration or input files.

The command-line entry points (`twinserve-run`, `twinserve-serve`) catch `UserError` and print
its message (one or two lines: the key, the value given, what is allowed) instead of a
traceback; ``--debug`` or ``TWINSERVE_DEBUG=1`` shows the traceback too. Anything else that
escapes is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class UserError(ValueError):
    """A mistake the user can fix by changing a config value or an input file.

    Contract: ``str(err)`` is the whole message a user reads (no traceback needed to act on it);
    ``key`` is the config key at fault (``workload.path``), or None when the fault is in a file's
    contents (the message then names the file and row). A `ValueError`, so code that checks
    values the usual way still catches it."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownNameError(UserError, KeyError):
    """A name that no registry knows (policy, router, workload, cost model, hardware, ...).

    Also a `KeyError` (a registry lookup that failed); ``str()`` is the plain message, not
    KeyError's quoted repr."""

    def __init__(self, kind: str, name: str, known: Iterable[str], key: str | None = None,
                 hint: str = "") -> None:
        self.kind, self.name, self.known = kind, name, sorted(known)
        where = f"{key}={name}" if key else f"'{name}'"
        super().__init__(f"unknown {kind} {where}; known: {', '.join(self.known)}{hint}", key)

    def at_key(self, key: str) -> "UnknownNameError":
        """The same error naming the config key that held the name."""
        hint = str(self).split("; known: ", 1)[1][len(", ".join(self.known)):]
        return UnknownNameError(self.kind, self.name, self.known, key, hint)


def bad_value(key: str, value: Any, allowed: str) -> UserError:
    """``key=value`` is not allowed; ``allowed`` says what is (a sentence fragment)."""
    return UserError(f"{key}={value}: {allowed}", key)
