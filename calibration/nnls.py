"""Non-negative least squares (Lawson–Hanson active set) in numpy."""

from __future__ import annotations

import numpy as np


def nnls(A: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """argmin ||A x - b||_2 subject to x >= 0.

    Columns are scaled to unit norm first (features differ by many orders of magnitude) and the
    solution scaled back; an all-zero column gets coefficient 0. Raises RuntimeError if the active
    set does not converge within ``max_iter`` (default 30 * columns) iterations.
    """
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    m, n = A.shape
    norms = np.linalg.norm(A, axis=0)
    live = norms > 0
    scale = np.where(live, norms, 1.0)
    As = A / scale
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(float).eps * max(m, n) * max(1.0, float(np.abs(As).sum(axis=0).max(initial=0)))
    w = As.T @ (b - As @ x)
    limit = max_iter if max_iter is not None else 30 * n
    for _ in range(limit):
        cand = ~passive & live
        if not cand.any() or w[cand].max() <= tol:
            return x / scale
        j = int(np.argmax(np.where(cand, w, -np.inf)))
        passive[j] = True
        while True:
            s = np.zeros(n)
            if not passive.any():
                break
            s[passive] = np.linalg.lstsq(As[:, passive], b, rcond=None)[0]
            if s[passive].min() > 0:
                break
            neg = passive & (s <= 0)
            alpha = np.min(x[neg] / (x[neg] - s[neg]))
            x = x + alpha * (s - x)
            passive &= x > tol
            x[~passive] = 0.0
        x = s
        w = As.T @ (b - As @ x)
    raise RuntimeError("nnls did not converge")
