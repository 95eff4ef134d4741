"""Compiled (numba) per-step MuJoCo loops of :class:`~contactopt.solvers.idto.problem.IDTOProblem`:
rigid-body terms (``mj_inverse``, ``mj_fullM``), their derivatives (``mjd_inverseFD``), the
velocities (``mj_differentiatePos``) and the retraction (``mj_integratePos``), calling the C
functions of the bindings' ``libmujoco`` without the GIL (:mod:`contactopt.native`).  Used where
:data:`~contactopt.solvers.idto.problem.NATIVE_STEPS` is set; the Python loops of the problem
are the reference."""

from __future__ import annotations

from numba import njit as _njit

from ... import native


@_njit(cache=True, nogil=True, inline="always")
def _load_step(qpos, qvel, qacc, q, v, a, t):
    """``MjData`` views ← ``q_{t+1}``, ``v_{t+1}``, ``a_t`` (the state of step ``t``'s inverse dynamics)."""
    for j in range(qpos.shape[0]):
        qpos[j] = q[t + 1, j]
    for j in range(qvel.shape[0]):
        qvel[j] = v[t + 1, j]
        qacc[j] = a[t, j]


@_njit(cache=True, nogil=True)
def _rigid_kernel(m, d, qpos, qvel, qacc, qfrc_inverse, q, v, a, start, mass, rho, M):
    """The loop of :meth:`IDTOProblem._rigid_batch` for the steps ``start … start + len(rho) − 1``:
    load ``q_{t+1}, v_{t+1}, a_t``, ``mj_inverse`` into ``rho[k]``, with ``mass`` ``mj_fullM``
    into ``M[k]``."""
    nv = qvel.shape[0]
    for k in range(rho.shape[0]):
        _load_step(qpos, qvel, qacc, q, v, a, start + k)
        native.mj_inverse(m, d)
        for j in range(nv):
            rho[k, j] = qfrc_inverse[j]
        if mass:
            native.mj_fullm(m, d, M[k].ctypes.data)


@_njit(cache=True, nogil=True)
def _rigid_fd_kernel(m, d, qpos, qvel, qacc, q, v, a, start, eps, DfDq, DfDv):
    """The loop of :meth:`IDTOProblem._rigid_derivatives`: ``mjd_inverseFD`` of the steps
    ``start …`` into ``DfDq[k]``, ``DfDv[k]`` (MuJoCo's transposed layout)."""
    for k in range(DfDq.shape[0]):
        _load_step(qpos, qvel, qacc, q, v, a, start + k)
        native.mjd_inversefd(m, d, eps[k], 0, DfDq[k].ctypes.data, DfDv[k].ctypes.data, 0, 0, 0, 0, 0)


@_njit(cache=True, nogil=True)
def _velocity_kernel(m, v, h, q):
    """``v[t] ← (q[t] ⊖ q[t − 1]) / h`` (``mj_differentiatePos``) for ``t = 1 … T``."""
    for t in range(1, v.shape[0]):
        native.mj_differentiatepos(m, v[t].ctypes.data, h, q[t - 1].ctypes.data, q[t].ctypes.data)


@_njit(cache=True, nogil=True)
def _retract_kernel(m, out, dq):
    """``out[t] ← out[t] ⊕ dq[t − 1]`` (``mj_integratePos``, dt 1) for ``t = 1 … T``."""
    for t in range(1, out.shape[0]):
        native.mj_integratepos(m, out[t].ctypes.data, dq[t - 1].ctypes.data, 1.0)
