"""Helpers shared by the dynamics implementations.

* strided differentiation: differentiate every k-th step of a trajectory, interpolate between
  (every :class:`~contactopt.dynamics.Dynamics` with a ``derivative_stride``);
* :func:`thread_count`: the number of derivative threads;
* :class:`DerivativePool`: the thread pool a dynamics object differentiates on, and its lifecycle.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import ParameterError

__all__ = ["DerivativePool", "derivative_indices", "interpolate_skipped", "thread_count"]


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

    All skipped rows are filled by one gather and one weighted sum per array (a per-pair loop
    costs about 10 µs a pair: 0.8 ms on a 160-step horizon at stride 2, a third of its finite
    differences); :func:`_interpolate_skipped_reference` is the readable loop it equals.

    Args:
      A: ``(T, ndx, ndx)``; B: ``(T, ndx, nu)``; idx: sorted differentiated step indices.
    """
    idx = np.asarray(idx, dtype=np.intp)
    if idx.size < 2:
        return
    T = A.shape[0]
    # for every step i: the differentiated step a at or before it and the next one b
    seg = np.searchsorted(idx, np.arange(T), side="right") - 1
    seg = np.clip(seg, 0, idx.size - 2)
    a, b = idx[seg], idx[seg + 1]
    rows = np.nonzero((np.arange(T) > a) & (np.arange(T) < b))[0]
    if rows.size == 0:
        return
    a, b = a[rows], b[rows]
    w = (rows - a) / (b - a)
    for M in (A, B):
        M[rows] = (1 - w)[:, None, None] * M[a] + w[:, None, None] * M[b]


def _interpolate_skipped_reference(A: np.ndarray, B: np.ndarray, idx: np.ndarray) -> None:
    """The readable per-pair loop :func:`interpolate_skipped` equals (the tests compare them)."""
    for a, b in zip(idx[:-1], idx[1:]):
        if b - a > 1:
            w = (np.arange(a + 1, b) - a) / (b - a)
            A[a + 1:b] = (1 - w)[:, None, None] * A[a] + w[:, None, None] * A[b]
            B[a + 1:b] = (1 - w)[:, None, None] * B[a] + w[:, None, None] * B[b]


class DerivativePool:
    """A lazily created thread pool for derivatives, shut down by :meth:`close` (or ``with``).

    Subclasses set :attr:`nthread` (the default pool size) and call :meth:`_ensure_pool`.
    """

    nthread: int = 1
    _pool: ThreadPoolExecutor | None = None
    _pool_size: int = 0

    def _ensure_pool(self, workers: int) -> ThreadPoolExecutor:
        """The pool, (re)created with at least ``workers`` threads (and at least :attr:`nthread`)."""
        if self._pool is None or self._pool_size < workers:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool_size = max(workers, self.nthread)
            self._pool = ThreadPoolExecutor(max_workers=self._pool_size,
                                            thread_name_prefix=f"contactopt-{type(self).__name__}")
        return self._pool

    def close(self) -> None:
        """Shut the derivative thread pool down (it is recreated on demand)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):  # pragma: no cover - best effort at interpreter shutdown
        try:
            self.close()
        except Exception:
            pass
