"""Workloads: request specs with arrival times and lengths, loaders for public traces, synthetic
generators, and the `WORKLOADS` registry that Hydra configs select from."""

from twinserve.core.workload.arrivals import ARRIVALS, arrival_times
from twinserve.core.workload.builders import WORKLOADS, build, shape
from twinserve.core.workload.generators import sessions, shared_prefix, synthetic
from twinserve.core.workload.lengths import LENGTHS, sample_lengths
from twinserve.core.workload.loaders import (bundled_path, byte_tokenize, load_azure, load_csv,
                                             load_mooncake, load_sharegpt)
from twinserve.core.workload.spec import RequestSpec
from twinserve.core.workload.streams import stream
from twinserve.core.workload.workload import Workload

__all__ = [
    "ARRIVALS", "LENGTHS", "WORKLOADS", "RequestSpec", "Workload", "arrival_times", "build",
    "bundled_path", "byte_tokenize", "load_azure", "load_csv", "load_mooncake", "load_sharegpt",
    "sample_lengths", "sessions", "shape", "shared_prefix", "stream", "synthetic",
]
