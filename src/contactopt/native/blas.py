"""Run a block of small dense linear algebra on one BLAS thread (OpenBLAS only; otherwise a no-op).

IDTO's matrices are small (banded Hessians of a few hundred rows, multiplier systems of
``T·nz`` rows), and so are the convex contact model's (a humanoid's 123 contact rows; the
numba kernels' ``np.dot`` calls SciPy's OpenBLAS).  A multi-threaded OpenBLAS splits such
products over the cores and then waits for every thread to be scheduled: on a busy 2-core
machine a ``200 × 120 × 120`` product was measured at ~25 ms with two threads and ~0.4 ms with
one, and 500 convex humanoid round trips at 68 s against 12 s.
:func:`single_threaded_blas` sets the thread count of the *calling thread only* with
OpenBLAS's ``openblas_set_num_threads_local`` (OpenBLAS ≥ 0.3.27) for every OpenBLAS
library loaded in the process (NumPy and SciPy wheels ship one each) and restores it on exit.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import threading

__all__ = ["one_blas_thread", "single_threaded_blas"]

_lock = threading.Lock()
_setters: list | None = None


def _find_setters() -> list:
    global _setters
    with _lock:
        if _setters is not None:
            return _setters
        found = []
        try:
            with open("/proc/self/maps") as fh:
                maps = fh.read()
        except OSError:
            maps = ""
        for path in sorted(set(re.findall(r"(/\S*openblas\S*\.so[\w.\-]*)", maps))):
            try:
                fn = ctypes.CDLL(path).openblas_set_num_threads_local
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_int]
            found.append(fn)
        _setters = found
        return found


@contextlib.contextmanager
def single_threaded_blas():
    """Context manager: OpenBLAS calls of this thread use one thread inside the block.

    Yields the number of OpenBLAS libraries limited (0 where none supports it: a no-op)."""
    import numpy  # noqa: F401  (make sure the BLAS libraries are loaded before the lookup)
    import scipy.linalg  # noqa: F401

    setters = _find_setters()
    prev = [fn(1) for fn in setters]
    try:
        yield len(setters)
    finally:
        for fn, p in zip(setters, prev):
            fn(p if p > 0 else 1)


def one_blas_thread(fn):
    """Decorator: ``fn`` runs inside :func:`single_threaded_blas` (nested uses are fine)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with single_threaded_blas():
            return fn(*args, **kwargs)

    return wrapper
