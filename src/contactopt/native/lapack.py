"""LAPACK's banded triangular solve without the interpreter lock.

SciPy's ``scipy.linalg.lapack`` wrappers hold the interpreter lock for the whole call.  In async
MPC the plant thread then waits for a planner's solve (IDTO's multiplier system: a banded
``dtbtrs`` with a few hundred right-hand sides, about 1 ms).  :func:`banded_transposed_solve`
calls the same LAPACK routine, SciPy's ``cython_lapack.dtbtrs``, through :mod:`ctypes`, which
releases the lock during a foreign call.  SciPy's wrapper stays the reference
(``tests/test_native_lapack.py``).
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

__all__ = ["banded_transposed_solve"]

_lock = threading.Lock()
_dtbtrs = None


def _routine():
    global _dtbtrs
    with _lock:
        if _dtbtrs is None:
            from numba.extending import get_cython_function_address

            addr = get_cython_function_address("scipy.linalg.cython_lapack", "dtbtrs")
            p_char, p_int, p_dbl = ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_void_p
            _dtbtrs = ctypes.CFUNCTYPE(None, p_char, p_char, p_char, p_int, p_int, p_int, p_dbl, p_int,
                                       p_dbl, p_int, p_int)(addr)
        return _dtbtrs


def banded_transposed_solve(cb: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``X`` with ``Uᵀ X = B`` for an upper-triangular banded ``U`` in LAPACK's upper band storage
    ``cb`` ``(kd+1, N)`` (``U[i, j] = cb[kd + i − j, j]``; what ``scipy.linalg.cholesky_banded``
    returns) and ``B`` ``(N, m)`` or ``(N,)``: forward substitution
    ``X[j] = (B[j] − Σ_{i<j} U[i, j] X[i]) / U[j, j]``, by LAPACK's ``dtbtrs(uplo="U",
    trans="T")``, with the interpreter lock released.  Returns a new array (Fortran order).

    Raises:
      np.linalg.LinAlgError: a zero diagonal entry (LAPACK's ``info > 0``).
      ValueError: shapes that do not match.
    """
    ab = np.asfortranarray(cb, dtype=np.float64)
    X = np.array(B, dtype=np.float64, order="F", copy=True)
    if ab.ndim != 2 or X.ndim not in (1, 2) or X.shape[0] != ab.shape[1]:
        raise ValueError(f"banded_transposed_solve: cb {ab.shape} and B {X.shape} do not match")
    n, kd = ab.shape[1], ab.shape[0] - 1
    nrhs = 1 if X.ndim == 1 else X.shape[1]
    if n == 0 or nrhs == 0:
        return X
    ints = [ctypes.c_int(v) for v in (n, kd, nrhs, max(1, kd + 1), max(1, n), 0)]
    _routine()(b"U", b"T", b"N", *(ctypes.byref(v) for v in ints[:3]), ab.ctypes.data_as(ctypes.c_void_p),
               ctypes.byref(ints[3]), X.ctypes.data_as(ctypes.c_void_p), ctypes.byref(ints[4]),
               ctypes.byref(ints[5]))
    info = ints[5].value
    if info > 0:
        raise np.linalg.LinAlgError(f"banded triangular solve: zero diagonal entry {info}")
    if info < 0:
        raise ValueError(f"banded_transposed_solve: LAPACK rejected argument {-info}")
    return X
