"""Composing the conf tree against its schema (`core.conf_schema`), with Hydra's composition
errors (an unknown key, a value of the wrong type, an unknown option) turned into one-line
`UserError`s that name the key."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from twinserve.core.conf_path import CONFIG_NAME, conf_dir
from twinserve.core.conf_schema import register
from twinserve.core.errors import UserError

T = TypeVar("T")
DETAILS = ("full_key:", "object_type=", "reference_type=", "To append to your config")


def _message_lines(e: BaseException) -> list[str]:
    """The lines of ``e``'s message that say what is wrong: OmegaConf's ``full_key:``,
    ``object_type=`` and ``reference_type=`` details, Hydra's search path and its hint to add
    the key with ``+`` (a typo is not a key to add) dropped."""
    text = str(e).split("\nConfig search path")[0]
    lines = [ln.strip().rstrip(":") for ln in text.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith(DETAILS)]


def composition_error(e: BaseException) -> UserError:
    """A `UserError` from a Hydra or OmegaConf exception, on one line: the outer message (which
    names the override or file), then the innermost cause's, with the dotted key it names
    (``full_key``) where the text does not already hold it."""
    chain = [e]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    parts: list[str] = []
    for exc in chain:
        for ln in _message_lines(exc):
            if ln.rstrip(".") not in parts:
                parts.append(ln.rstrip("."))
    key = next((str(getattr(x, "full_key", "") or re.search(r"full_key: (\S+)", str(x)).group(1))
                for x in reversed(chain) if getattr(x, "full_key", None) or "full_key: " in str(x)), None)
    text = ": ".join(parts) or type(e).__name__
    return UserError(text + (f" (key {key})" if key and key not in text else ""), key)


def user_errors_from_hydra(fn: Callable[[], T]) -> T:
    """``fn()``, with a Hydra or OmegaConf exception re-raised as `composition_error`."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        return fn()
    except (HydraException, OmegaConfBaseException) as e:
        raise composition_error(e) from e


def compose(overrides: Sequence[str] = (), config_dir: str | Path | None = None,
            config_name: str = CONFIG_NAME, job_name: str = "twinserve") -> Any:
    """The composed run config (a DictConfig) for ``overrides``, validated against the schema;
    `UserError` on a composition error."""
    from hydra import compose as hydra_compose, initialize_config_dir

    register()
    where = str(config_dir or conf_dir())

    def run() -> Any:
        with initialize_config_dir(config_dir=where, version_base="1.3", job_name=job_name):
            return hydra_compose(config_name=config_name, overrides=list(overrides))

    return user_errors_from_hydra(run)


def each_value(overrides: Sequence[str]) -> list[list[str]]:
    """Override lists that together give every value of a sweep (``a=1,2 b=x,y``) once: the
    first values of all, then each further value of one sweep with the first of the others."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    choices = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
               else [o.input_line] for o in parsed]
    firsts = [c[0] for c in choices]
    lists = [firsts]
    for i, c in enumerate(choices):
        lists += [[*firsts[:i], v, *firsts[i + 1:]] for v in c[1:]]
    return lists


def check_composes(overrides: Sequence[str], config_dir: str | Path | None = None,
                   config_name: str = CONFIG_NAME) -> None:
    """Every value of ``overrides`` (sweeps included, `each_value`) composes against the schema;
    `UserError` otherwise. Run before Hydra's own launch, whose composition errors are not
    `UserError`s."""
    for one in user_errors_from_hydra(lambda: each_value(overrides)):
        compose(one, config_dir, config_name)
