"""Named, independent random streams derived from one seed."""

from __future__ import annotations

import zlib

import numpy as np


def stream(seed: int, name: str) -> np.random.Generator:
    """A numpy Generator for the stream ``name`` of ``seed``.

    Each consumer (arrivals, prompt lengths, output lengths, groups, ...) draws from its own
    stream, so adding draws to one never shifts another: changing the output-length distribution
    leaves the arrival times of the same seed unchanged.
    """
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])
