"""Triton kernels of the engine's CUDA path (imported lazily: triton is only needed on GPU hosts)."""


def available() -> bool:
    """Whether triton imports here (the CUDA build of torch brings it)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
