"""``python -m twinserve.server.serve SPEC.pkl READY.json``: run `runtime.serve` from a pickled
``(engine_cfg, server_cfg)`` and write the ready file (what `launch.start_server` starts).

This module imports nothing heavy at the top: worker processes are started with ``spawn``, which
re-imports the parent's main module in every child.
"""

from __future__ import annotations

import pickle
import signal
import sys


def _main(argv: list[str]) -> int:
    from twinserve.server.runtime import serve

    spec_file, ready_file = argv[0], argv[1]
    with open(spec_file, "rb") as f:
        engine_cfg, server_cfg = pickle.load(f)
    try:
        serve(engine_cfg, server_cfg, ready_file)
    except SystemExit as e:
        return 0 if e.code in (None, 0, 128 + signal.SIGTERM, 128 + signal.SIGINT) else int(e.code or 1)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
