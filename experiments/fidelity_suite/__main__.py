"""``python -m twinserve.experiments.fidelity_suite``."""

from twinserve.experiments.fidelity_suite.cli import main

main()
