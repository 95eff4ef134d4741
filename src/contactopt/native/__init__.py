"""The ``libmujoco`` call layer shared by the compiled (numba) kernels.

See :mod:`contactopt.native.libmujoco`: :data:`NATIVE`, the bound MuJoCo C functions
(``mj_step``, ``mj_inverse``, ``mjd_inversefd``, ...), raw-address arrays (``raw_f64``, ...),
``mjData`` / ``mjModel`` field offsets, numpy-exact helpers (:func:`mv`, :func:`np_max`,
:func:`np_min`) and :func:`native_kinematics`.
"""

from . import libmujoco
from .libmujoco import *  # noqa: F403  (the call layer's public names, listed in libmujoco.__all__)

__all__ = list(libmujoco.__all__)
