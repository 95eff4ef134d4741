"""The state space shared by every dynamics of a MuJoCo model.

State ``x = [qpos (nq), qvel (nv), act (na)]`` (``nx = nq + nv + na``); tangent
``dx = [dq (nv), dv (nv), dact (na)]`` (``ndx = 2 nv + na``), the convention of
``mjd_transitionFD``: ``dq`` is MuJoCo's ``mj_differentiatePos`` (quaternions of free
and ball joints as local rotation vectors), the rest plain differences.  A model without free
or ball joints (``nq == nv``) takes a batched path with the same numbers (for hinges and
slides ``mj_differentiatePos`` and ``mj_integratePos`` are a subtraction and an addition).
"""

from __future__ import annotations

import mujoco
import numpy as np

from ..errors import ParameterError, as_array

__all__ = ["MujocoStateSpace"]


class MujocoStateSpace:
    """Sizes, control limits and tangent-space arithmetic of a model's state.

    Subclasses call :meth:`_init_state_space` with their model.

    Attributes:
      model: the ``MjModel``; nq, nv, na, nu: its sizes; nx, ndx: packed state and tangent sizes.
      control_lower, control_upper: ``(nu,)`` the ``ctrlrange`` of ctrl-limited actuators, ±inf
        otherwise.
    """

    def _init_state_space(self, model: mujoco.MjModel) -> None:
        self.model = model
        self.nq, self.nv, self.na, self.nu = model.nq, model.nv, model.na, model.nu
        self.nx = model.nq + model.nv + model.na
        self.ndx = 2 * model.nv + model.na
        limited = model.actuator_ctrllimited.astype(bool) if model.nu else np.zeros(0, bool)
        rng = model.actuator_ctrlrange
        self.control_lower = np.where(limited, rng[:, 0], -np.inf) if model.nu else np.zeros(0)
        self.control_upper = np.where(limited, rng[:, 1], np.inf) if model.nu else np.zeros(0)

    def _set_state(self, d: mujoco.MjData, x: np.ndarray) -> None:
        """Write ``x (nx,)`` into ``d.qpos``, ``d.qvel``, ``d.act``."""
        nq, nv = self.nq, self.nv
        d.qpos[:] = x[:nq]
        d.qvel[:] = x[nq:nq + nv]
        if self.na:
            d.act[:] = x[nq + nv:]

    def _get_state(self, d: mujoco.MjData, out: np.ndarray) -> None:
        """Read ``d``'s state into ``out (nx,)``."""
        nq, nv = self.nq, self.nv
        out[:nq] = d.qpos
        out[nq:nq + nv] = d.qvel
        if self.na:
            out[nq + nv:] = d.act

    def state_difference(self, X0, X1) -> np.ndarray:
        """Tangent differences ``X1 ⊖ X0`` of ``(N, nx)`` (or ``(nx,)``) arrays → ``(N, ndx)``."""
        X0 = np.asarray(X0, dtype=float)
        single = X0.ndim == 1
        X0 = as_array("X0", np.atleast_2d(X0), (None, self.nx))
        X1 = as_array("X1", np.atleast_2d(X1), X0.shape)
        nq, nv = self.nq, self.nv
        out = np.empty((X0.shape[0], self.ndx))
        out[:, nv:] = X1[:, nq:] - X0[:, nq:]
        if nq == nv:
            # hinge and slide joints only: mj_differentiatePos is (q1 − q0) / 1, the same numbers
            out[:, :nv] = X1[:, :nq] - X0[:, :nq]
        else:
            dq = np.empty(nv)
            for i in range(X0.shape[0]):
                mujoco.mj_differentiatePos(self.model, dq, 1.0, X0[i, :nq], X1[i, :nq])
                out[i, :nv] = dq
        return out[0] if single else out

    def state_integrate(self, X, dX) -> np.ndarray:
        """``X ⊕ dX`` for ``(N, nx)`` states and ``(N, ndx)`` tangents (or single rows)."""
        X = np.asarray(X, dtype=float)
        single = X.ndim == 1
        X = as_array("X", np.atleast_2d(X), (None, self.nx))
        dX = as_array("dX", np.atleast_2d(dX), (X.shape[0], self.ndx))
        nq, nv = self.nq, self.nv
        out = X.copy()
        out[:, nq:] += dX[:, nv:]
        if nq == nv:
            # hinge and slide joints only: mj_integratePos is q + dq · 1, the same numbers
            out[:, :nq] += dX[:, :nv]
            return out[0] if single else out
        for i in range(X.shape[0]):
            q = out[i, :nq].copy()
            mujoco.mj_integratePos(self.model, q, dX[i, :nv], 1.0)
            out[i, :nq] = q
        return out[0] if single else out

    def _rollout_inputs(self, x0, U, X_ref, K, lower, upper, *, max_abs=None):
        """The checked arguments of a ``rollout``: ``x0 (nx,)``, ``U (T, nu)``, ``X_ref (≥T, nx)`` and
        ``K (T, nu, ndx)`` (both None without feedback), control limits ``lo, hi (nu,)`` (default
        :attr:`control_lower` / :attr:`control_upper`).

        Raises:
          ShapeError, NonFiniteError: a bad array; ParameterError: ``K`` without ``X_ref``, too
          few reference rows, or an ``x0`` entry beyond ``max_abs``.
        """
        x0 = as_array("x0", x0, (self.nx,), max_abs=max_abs)
        U = as_array("U", U, (None, self.nu))
        T = U.shape[0]
        if K is not None:
            K = as_array("K", K, (T, self.nu, self.ndx))
            if X_ref is None:
                raise ParameterError("rollout: X_ref is required with feedback gains K")
            X_ref = as_array("X_ref", X_ref, (None, self.nx))
            if X_ref.shape[0] < T:
                raise ParameterError(f"rollout: X_ref has {X_ref.shape[0]} rows, need at least {T}")
        lo = self.control_lower if lower is None else np.asarray(lower, dtype=float)
        hi = self.control_upper if upper is None else np.asarray(upper, dtype=float)
        return x0, U, X_ref, K, lo, hi

    def _derivative_inputs(self, X, U):
        """The checked arguments of ``derivatives``: ``(X (T or T+1, nx), U (T, nu), T)``, T ≥ 1.

        Raises:
          ShapeError, NonFiniteError: a bad array; ParameterError: no controls, or X with a row
          count other than T or T + 1.
        """
        U = as_array("U", U, (None, self.nu))
        T = U.shape[0]
        if T < 1:
            raise ParameterError("horizon must be at least one step (U has 0 rows)")
        X = as_array("X", X, (None, self.nx))
        if X.shape[0] not in (T, T + 1):
            raise ParameterError(f"X has {X.shape[0]} rows, expected {T} or {T + 1} for {T} controls")
        return X, U, T
