"""`twinserve-run`: the Hydra app (config tree in experiments/conf/)."""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from twinserve.experiments.run import run_experiment


# An absolute path (a file search path, not a Python package): works from a checkout, an
# editable install and a wheel alike, with no __init__.py in conf/.
CONF_DIR = str(Path(__file__).resolve().parent / "conf")


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def _app(cfg: DictConfig) -> None:
    run_experiment(cfg, HydraConfig.get().runtime.output_dir)


def main() -> None:
    """Console entry point: ``twinserve-run [group=option ...] [key=value ...] [-m]``."""
    _app()


if __name__ == "__main__":
    main()
