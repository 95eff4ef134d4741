"""LAPACK's banded solves without the interpreter lock.

SciPy's ``scipy.linalg.lapack`` wrappers hold the interpreter lock for the whole call.  In async
MPC the plant thread then waits for a planner's solve (IDTO's multiplier system: a banded
``dtbtrs`` with a few hundred right-hand sides, about 1 ms, or the banded LU of its KKT system).
:func:`banded_transposed_solve` and :func:`banded_lu_solve` call the same LAPACK routines,
SciPy's ``cython_lapack.dtbtrs`` and ``dgbsv``, through :mod:`ctypes`, which releases the lock
during a foreign call.  SciPy's wrappers stay the reference (``tests/test_native_lapack.py``).
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

__all__ = ["banded_lu_solve", "banded_transposed_solve"]

_lock = threading.Lock()
_dtbtrs = None
_dgbsv = None


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
    _check_info(ints[5].value, "banded_transposed_solve",
                "banded triangular solve: zero diagonal entry")
    return X


def _check_info(info: int, name: str, singular: str) -> None:
    """LAPACK's ``info``: > 0 a singular matrix (``LinAlgError``: ``singular`` and the index),
    < 0 a rejected argument (``ValueError`` naming ``name``)."""
    if info > 0:
        raise np.linalg.LinAlgError(f"{singular} {info}")
    if info < 0:
        raise ValueError(f"{name}: LAPACK rejected argument {-info}")


def _gbsv():
    global _dgbsv
    with _lock:
        if _dgbsv is None:
            from numba.extending import get_cython_function_address

            addr = get_cython_function_address("scipy.linalg.cython_lapack", "dgbsv")
            p_int, p_dbl = ctypes.POINTER(ctypes.c_int), ctypes.c_void_p
            _dgbsv = ctypes.CFUNCTYPE(None, p_int, p_int, p_int, p_int, p_dbl, p_int, p_dbl, p_dbl,
                                      p_int, p_int)(addr)
        return _dgbsv


def banded_lu_solve(ab: np.ndarray, bandwidth: int, b: np.ndarray) -> np.ndarray:
    """``x`` with ``K x = b`` for a square banded ``K`` of half-width ``bandwidth`` (``kl = ku``)
    in LAPACK's ``gbsv`` storage ``ab`` ``(3·bandwidth + 1, N)``: ``K[i, j] = ab[2·bandwidth + i −
    j, j]``, the first ``bandwidth`` rows workspace.  LU with partial pivoting, LAPACK's
    ``dgbsv``, with the interpreter lock released; ``ab`` is overwritten by the factors (pass a
    Fortran-ordered float64 array to avoid a copy).  ``b`` ``(N,)`` or ``(N, m)``; returns a new
    array.

    Raises:
      np.linalg.LinAlgError: an exactly zero pivot (a singular ``K``; LAPACK's ``info > 0``).
      ValueError: shapes that do not match.
    """
    kl = int(bandwidth)
    a = np.asfortranarray(ab, dtype=np.float64)
    x = np.array(b, dtype=np.float64, order="F", copy=True)
    n = a.shape[1] if a.ndim == 2 else -1
    if a.ndim != 2 or a.shape[0] != 3 * kl + 1 or x.ndim not in (1, 2) or x.shape[0] != n:
        raise ValueError(f"banded_lu_solve: ab {a.shape} (bandwidth {kl}) and b {x.shape} "
                         "do not match")
    nrhs = 1 if x.ndim == 1 else x.shape[1]
    if n == 0 or nrhs == 0:
        return x
    ipiv = np.zeros(n, dtype=np.intc)
    ints = [ctypes.c_int(v) for v in (n, kl, kl, nrhs, 3 * kl + 1, max(1, n), 0)]
    ptr = ctypes.c_void_p
    _gbsv()(*(ctypes.byref(v) for v in ints[:4]), a.ctypes.data_as(ptr), ctypes.byref(ints[4]),
            ipiv.ctypes.data_as(ptr), x.ctypes.data_as(ptr), ctypes.byref(ints[5]),
            ctypes.byref(ints[6]))
    _check_info(ints[6].value, "banded_lu_solve", "banded LU of a singular matrix: zero pivot")
    return x
