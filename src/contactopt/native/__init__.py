"""The ``libmujoco`` call layer shared by the compiled (numba) kernels.

See :mod:`contactopt.native.libmujoco`: :data:`NATIVE`, the bound MuJoCo C functions
(``mj_step``, ``mj_inverse``, ``mjd_inversefd``, ...), raw-address arrays (``raw_f64``, ...),
``mjData`` / ``mjModel`` field offsets, numpy-exact helpers (:func:`mv`, :func:`np_max`,
:func:`np_min`) and :func:`native_kinematics`.

See :mod:`contactopt.native.preflight`: :func:`check_compiled_loops`, the check the entry points
of the compiled loops run once on a model, so that what would be a MuJoCo fatal error inside a
loop (which ends the process) is a :class:`~contactopt.errors.ModelError` before it runs.

See :mod:`contactopt.native.blas`: :func:`single_threaded_blas`, one OpenBLAS thread for the
small dense products of the solvers (a multi-threaded OpenBLAS stalls on a busy machine).
"""

from . import libmujoco, preflight
from .blas import single_threaded_blas
from .libmujoco import *  # noqa: F403  (the call layer's public names, listed in libmujoco.__all__)
from .preflight import (  # noqa: F401  (listed in preflight.__all__)
    COMPILED_LOOP_CALLS,
    MAX_PROBE_KEYFRAMES,
    MEMORY_HEADROOM,
    check_compiled_loops,
    check_horizon_memory,
    memory_limit_bytes,
)

__all__ = list(libmujoco.__all__) + list(preflight.__all__) + ["single_threaded_blas"]
