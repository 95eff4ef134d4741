"""Helpers shared by the dynamics implementations.

* strided differentiation: differentiate every k-th step of a trajectory, interpolate between
  (every :class:`~contactopt.dynamics.Dynamics` with a ``derivative_stride``);
* :func:`thread_count`: the number of derivative threads.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ParameterError

__all__ = ["derivative_indices", "interpolate_skipped", "thread_count"]


def thread_count(nthread: int | None) -> int:
    """``nthread`` checked (a positive integer), or the default: ``$CONTACTOPT_NUM_THREADS`` (the
    sweep's single-threaded workers set it to 1), else ``os.cpu_count()``.

    Raises:
      ParameterError: not a positive integer (or a malformed environment variable).
    """
    if nthread is None:
        text = os.environ.get("CONTACTOPT_NUM_THREADS", "").strip()
        if text and not text.isdigit():
            raise ParameterError(f"CONTACTOPT_NUM_THREADS must be a positive integer, got {text!r}")
        nthread = int(text or 0) or os.cpu_count() or 1
    if isinstance(nthread, bool) or int(nthread) != nthread or nthread < 1:
        raise ParameterError(f"nthread must be a positive integer, got {nthread!r}")
    return int(nthread)


def derivative_indices(T: int, stride: int) -> np.ndarray:
    """Step indices ``0, k, 2k, …`` and ``T − 1`` that are differentiated for a horizon ``T ≥ 1``."""
    idx = list(range(0, T, stride))
    if idx[-1] != T - 1:
        idx.append(T - 1)
    return np.array(idx, dtype=int)


def interpolate_skipped(A: np.ndarray, B: np.ndarray, idx: np.ndarray) -> None:
    """Fill the rows between differentiated steps in place: for ``a < i < b`` consecutive in
    ``idx``, ``A_i = (1 − w) A_a + w A_b`` with ``w = (i − a)/(b − a)`` (same for ``B``).

    Args:
      A: ``(T, ndx, ndx)``; B: ``(T, ndx, nu)``; idx: sorted differentiated step indices.
    """
    for a, b in zip(idx[:-1], idx[1:]):
        if b - a > 1:
            w = (np.arange(a + 1, b) - a) / (b - a)
            A[a + 1:b] = (1 - w)[:, None, None] * A[a] + w[:, None, None] * A[b]
            B[a + 1:b] = (1 - w)[:, None, None] * B[a] + w[:, None, None] * B[b]
