"""`twinserve-run`: the Hydra app (config tree in ``conf/``, `core.conf_path`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from twinserve.core.cli_errors import DEBUG_ENV, plain_warnings, report_user_errors, take_debug_flag
from twinserve.core.conf_path import CONFIG_NAME, conf_dir
from twinserve.core.conf_compose import check_composes
from twinserve.core.conf_schema import register
from twinserve.core.config_checks import check_group_options
from twinserve.experiments.cli_help import help_text
from twinserve.experiments.run import run_experiment


CONF_DIR = str(conf_dir())
PROG = "twinserve-run"


@hydra.main(config_path=CONF_DIR, config_name=CONFIG_NAME, version_base="1.3")
def _app(cfg: DictConfig) -> None:
    debug = os.environ.get(DEBUG_ENV) == "1"
    report_user_errors(PROG, debug, lambda: run_experiment(cfg, HydraConfig.get().runtime.output_dir))


def main() -> None:
    """Console entry point: ``twinserve-run [group=option ...] [key=value ...] [-m] [--debug]``."""
    if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:
        print(help_text(Path(CONF_DIR)))
        return
    plain_warnings()
    debug = take_debug_flag(sys.argv)
    if debug:
        os.environ[DEBUG_ENV] = "1"          # read inside the job, and by joblib's workers
        os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra's own traceback, unabridged
    report_user_errors(PROG, debug, lambda: check_group_options(sys.argv[1:], CONF_DIR))
    register()
    report_user_errors(PROG, debug, lambda: check_arguments(sys.argv[1:]))
    _app()


def check_arguments(argv: list[str]) -> None:
    """The overrides on the command line (Hydra's own argument parser picks them out) compose
    against the schema, in the tree an absolute ``-cp`` names; flags Hydra rejects, and a
    relative ``-cp`` (relative to this module), are left to Hydra."""
    from hydra._internal.utils import get_args_parser

    try:
        args = get_args_parser().parse_args(argv)
    except SystemExit:
        return
    where = Path(args.config_path or CONF_DIR)
    if where.is_absolute() and where.is_dir() and not args.config_dir:
        check_composes(args.overrides, where, args.config_name or CONFIG_NAME)


if __name__ == "__main__":
    main()
