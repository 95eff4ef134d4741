"""MuJoCo dynamics for planners: ``x' = f(x, u)`` by ``mj_step``, derivatives by ``mjd_transitionFD``.

State ``x = [qpos (nq), qvel (nv), act (na)]``; derivatives act on the tangent
``dx = [dq (nv), dv (nv), dact (na)]`` (``ndx = 2 nv + na``), exactly the
convention of ``mjd_transitionFD``::

    A_i = ∂(f(x_i ⊕ dx, u_i) ⊖ f(x_i, u_i))/∂dx   (ndx, ndx)
    B_i = ∂(f(x_i, u_i + du) ⊖ f(x_i, u_i))/∂du   (ndx, nu)

Derivatives of the ``T`` steps of a trajectory are independent, so they are
evaluated on a thread pool (one ``MjData`` per thread; ``mjd_transitionFD``
releases the GIL, so the threads run in parallel).  With ``derivative_stride=k``
only every k-th step (and the last) is differentiated and the others are linearly
interpolated — ``k``× fewer finite differences for slowly varying Jacobians.

The planner's model may differ from the plant's (time step, contact softness,
masses): build it with :func:`contactopt.model.with_timestep` and
:func:`smooth_contacts` and pass it here; the plant keeps its own model.
"""

from __future__ import annotations

import copy
import os
from concurrent.futures import ThreadPoolExecutor

import mujoco
import numpy as np

from ..errors import ParameterError, as_array, check_positive

__all__ = ["MujocoDynamics", "smooth_contacts"]

# MuJoCo's "simulation is unstable" warnings; after each it resets or zeroes the offending values
_BAD_WARNINGS = (
    int(mujoco.mjtWarning.mjWARN_BADQPOS),
    int(mujoco.mjtWarning.mjWARN_BADQVEL),
    int(mujoco.mjtWarning.mjWARN_BADQACC),
    int(mujoco.mjtWarning.mjWARN_BADCTRL),
)
_BAD_WARNINGS_IDX = np.array(_BAD_WARNINGS, dtype=np.intp)


class MujocoDynamics:
    """Discrete dynamics of a MuJoCo model, one ``mj_step`` per step, with FD derivatives.

    Args:
      model: the planner's ``MjModel`` (its ``opt.timestep`` is the step ``h``).  It is
        used read-only and must not be modified while this object is in use.
      nthread: threads for derivatives (default ``os.cpu_count()``); 1 = serial.
      eps: finite-difference step of ``mjd_transitionFD`` (> 0).
      centered: central (True) or forward (False, half the cost) differences.
      derivative_stride: differentiate every k-th step (and the last) and
        interpolate linearly in between (k ≥ 1; 1 = every step).

    Attributes:
      nx, ndx, nu: packed state, tangent and control sizes.
      timestep: ``h`` in seconds.
      control_lower, control_upper: ``(nu,)`` the model's ``ctrlrange`` for
        ctrl-limited actuators, ±inf otherwise (MuJoCo clamps to ``ctrlrange`` itself).
    """

    def __init__(self, model: mujoco.MjModel, *, nthread: int | None = None, eps: float = 1e-6,
                 centered: bool = False, derivative_stride: int = 1):
        if not isinstance(model, mujoco.MjModel):
            raise ParameterError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
        self.model = model
        self.nq, self.nv, self.na, self.nu = model.nq, model.nv, model.na, model.nu
        self.nx = model.nq + model.nv + model.na
        self.ndx = 2 * model.nv + model.na
        self.timestep = float(model.opt.timestep)
        if nthread is None:
            nthread = os.cpu_count() or 1
        if int(nthread) != nthread or nthread < 1:
            raise ParameterError(f"nthread must be a positive integer, got {nthread!r}")
        self.nthread = int(nthread)
        self.eps = check_positive("eps", eps)
        self.centered = bool(centered)
        if int(derivative_stride) != derivative_stride or derivative_stride < 1:
            raise ParameterError(f"derivative_stride must be an integer >= 1, got {derivative_stride!r}")
        self.derivative_stride = int(derivative_stride)
        limited = model.actuator_ctrllimited.astype(bool) if model.nu else np.zeros(0, bool)
        rng = model.actuator_ctrlrange
        self.control_lower = np.where(limited, rng[:, 0], -np.inf) if model.nu else np.zeros(0)
        self.control_upper = np.where(limited, rng[:, 1], np.inf) if model.nu else np.zeros(0)
        self._data = mujoco.MjData(model)
        self._thread_data: list[mujoco.MjData] = []
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0

    # ------------------------------------------------------------------ lifecycle

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

    # ------------------------------------------------------------------ state helpers

    def _set_state(self, d: mujoco.MjData, x: np.ndarray) -> None:
        nq, nv = self.nq, self.nv
        d.qpos[:] = x[:nq]
        d.qvel[:] = x[nq:nq + nv]
        if self.na:
            d.act[:] = x[nq + nv:]

    def _get_state(self, d: mujoco.MjData, out: np.ndarray) -> None:
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
        for i in range(X.shape[0]):
            q = out[i, :nq].copy()
            mujoco.mj_integratePos(self.model, q, dX[i, :nv], 1.0)
            out[i, :nq] = q
        return out[0] if single else out

    # ------------------------------------------------------------------ simulation

    def step(self, x, u) -> np.ndarray:
        """One step ``x' = f(x, u)``: ``x (nx,)``, ``u (nu,)`` → ``(nx,)``.

        Raises:
          ContactoptError subclasses for bad input; ``FloatingPointError`` if MuJoCo
          flags the step as diverged.
        """
        x = as_array("x", x, (self.nx,))
        u = as_array("u", u, (self.nu,))
        r = self.rollout(x, u[None])
        if r.diverged:
            raise FloatingPointError("simulation diverged (MuJoCo reported a bad qpos/qvel/qacc)")
        return r.X[1]

    def rollout(self, x0, U, *, X_ref=None, K=None, lower=None, upper=None) -> "RolloutResult":
        """Simulate ``T`` steps from ``x0``, optionally under a linear feedback policy.

        ``u_i = clip(U_i + K_i (x_i ⊖ X_ref_i), lower, upper)``, ``x_{i+1} = mj_step(x_i, u_i)``
        (the feedback term only when ``K`` is given).  MuJoCo's ``qacc_warmstart`` is
        zeroed at the start, so a rollout depends only on its inputs.

        Args:
          x0: ``(nx,)`` initial state.
          U: ``(T, nu)`` feedforward controls.
          X_ref: ``(≥T, nx)`` reference states of the feedback (required with ``K``).
          K: ``(T, nu, ndx)`` feedback gains.
          lower, upper: ``(nu,)`` control limits (default: :attr:`control_lower`/``upper``).

        Returns:
          :class:`~contactopt.dynamics.RolloutResult`; on divergence the remaining rows
          are NaN and ``diverged`` is set (no exception).
        """
        from . import RolloutResult

        x0 = as_array("x0", x0, (self.nx,))
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
        clip = bool(np.any(np.isfinite(lo)) or np.any(np.isfinite(hi)))
        m, d = self.model, self._data
        nq, nv, na = self.nq, self.nv, self.na
        X = np.empty((T + 1, self.nx))
        Ua = np.empty((T, self.nu))
        X[0] = x0
        self._set_state(d, x0)
        d.qacc_warmstart[:] = 0.0
        d.time = 0.0
        warn_count = d.warning.number        # live view of the warning counters
        warn_count[_BAD_WARNINGS_IDX] = 0
        # the hot loop: MjData arrays bound once (they are views of the data's memory)
        qpos, qvel, act, ctrl = d.qpos, d.qvel, d.act, d.ctrl
        dx = np.empty(self.ndx)
        dq = dx[:nv]
        dv = dx[nv:2 * nv]
        da = dx[2 * nv:]
        for i in range(T):
            u = U[i]
            if K is not None:
                xr = X_ref[i]
                mujoco.mj_differentiatePos(m, dq, 1.0, xr[:nq], qpos)
                np.subtract(qvel, xr[nq:nq + nv], out=dv)
                if na:
                    np.subtract(act, xr[nq + nv:], out=da)
                u = u + K[i] @ dx
            ui = Ua[i]
            if clip:
                np.minimum(np.maximum(u, lo), hi, out=ui)
            else:
                ui[:] = u
            ctrl[:] = ui
            mujoco.mj_step(m, d)
            xi = X[i + 1]
            xi[:nq] = qpos
            xi[nq:nq + nv] = qvel
            if na:
                xi[nq + nv:] = act
            if warn_count[_BAD_WARNINGS_IDX].any() or not np.isfinite(xi[nq:nq + nv]).all():
                X[i + 1:] = np.nan
                Ua[i + 1:] = np.nan
                return RolloutResult(X, Ua, True, i)
        return RolloutResult(X, Ua)

    # ------------------------------------------------------------------ derivatives

    def derivative_indices(self, T: int) -> np.ndarray:
        """Step indices that are actually differentiated for a horizon ``T`` (the rest are interpolated)."""
        idx = list(range(0, T, self.derivative_stride))
        if idx[-1] != T - 1:
            idx.append(T - 1)
        return np.array(idx, dtype=int)

    def _fd_worker(self, j: int, indices, X, U, A, B) -> None:
        d = self._thread_data[j]
        m = self.model
        for i in indices:
            self._set_state(d, X[i])
            d.ctrl[:] = U[i]
            d.qacc_warmstart[:] = 0.0
            d.time = 0.0
            mujoco.mjd_transitionFD(m, d, self.eps, self.centered, A[i], B[i], None, None)

    def derivatives(self, X, U, *, nthread: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Transition Jacobians along a trajectory.

        Args:
          X: ``(T+1, nx)`` or ``(T, nx)`` states (row ``T`` is ignored).
          U: ``(T, nu)`` controls.
          nthread: override of the thread count for this call (1 = serial).

        Returns:
          ``A (T, ndx, ndx)``, ``B (T, ndx, nu)``; with a stride ``k > 1`` the rows
          between differentiated steps ``a < i < b`` are
          ``(1 − w) A_a + w A_b`` with ``w = (i − a)/(b − a)`` (same for ``B``).
        """
        U = as_array("U", U, (None, self.nu))
        T = U.shape[0]
        if T < 1:
            raise ParameterError("horizon must be at least one step (U has 0 rows)")
        X = as_array("X", X, (None, self.nx))
        if X.shape[0] not in (T, T + 1):
            raise ParameterError(f"X has {X.shape[0]} rows, expected {T} or {T + 1} for {T} controls")
        A = np.zeros((T, self.ndx, self.ndx))
        B = np.zeros((T, self.ndx, self.nu))
        idx = self.derivative_indices(T)
        nth = self.nthread if nthread is None else int(nthread)
        nth = max(1, min(nth, len(idx)))
        while len(self._thread_data) < nth:
            self._thread_data.append(mujoco.MjData(self.model))
        if nth == 1:
            self._fd_worker(0, idx, X, U, A, B)
        else:
            if self._pool is None or self._pool_size < nth:
                if self._pool is not None:
                    self._pool.shutdown(wait=True)
                self._pool_size = max(nth, self.nthread)
                self._pool = ThreadPoolExecutor(max_workers=self._pool_size,
                                                thread_name_prefix="contactopt-fd")
            # round-robin split balances steps with and without contacts
            futures = [self._pool.submit(self._fd_worker, j, idx[j::nth], X, U, A, B)
                       for j in range(nth)]
            for f in futures:
                f.result()
        if self.derivative_stride > 1:
            for a, b in zip(idx[:-1], idx[1:]):
                if b - a > 1:
                    w = (np.arange(a + 1, b) - a) / (b - a)
                    A[a + 1:b] = (1 - w)[:, None, None] * A[a] + w[:, None, None] * A[b]
                    B[a + 1:b] = (1 - w)[:, None, None] * B[a] + w[:, None, None] * B[b]
        return A, B


def smooth_contacts(model: mujoco.MjModel, *, solref=None, solimp=None,
                    timestep: float | None = None) -> mujoco.MjModel:
    """A copy of ``model`` with softer, smoother contacts for planning.

    Sets ``solref``/``solimp`` of every geom and explicit contact pair (the contact
    parameters MuJoCo mixes per contact).  A larger ``solref`` time constant
    (e.g. ``(0.05, 1)``) makes contacts softer; ``solimp`` with ``d0 = 0`` (e.g.
    ``(0, 0.95, 0.01, 0.5, 2)``) makes the contact force grow smoothly from zero with
    penetration, which gives the planner informative gradients before contact.

    Args:
      model: the model (untouched).
      solref: ``(2,)`` (timeconst, dampratio) or (−stiffness, −damping); None keeps it.
      solimp: ``(5,)`` (d0, dwidth, width, midpoint, power); None keeps it.
        ``0 ≤ d0, dwidth < 1``, ``width > 0``, ``0 < midpoint < 1``, ``power ≥ 1``.
      timestep: optional new ``opt.timestep`` (s).

    Returns:
      The modified copy.
    """
    out = copy.deepcopy(model)
    if solref is not None:
        sr = as_array("solref", solref, (2,))
        if sr[0] > 0 and sr[1] <= 0:
            raise ParameterError(f"solref: damping ratio must be positive, got {sr[1]}")
        if sr[0] == 0:
            raise ParameterError("solref: time constant (or stiffness) must be nonzero")
        out.geom_solref[:] = sr
        if out.npair:
            out.pair_solref[:] = sr
    if solimp is not None:
        si = as_array("solimp", solimp, (5,))
        d0, dw, width, mid, power = si
        if not (0 <= d0 < 1 and 0 <= dw < 1):
            raise ParameterError(f"solimp: d0 and dwidth must lie in [0, 1), got {d0}, {dw}")
        if not width > 0 or not 0 < mid < 1 or not power >= 1:
            raise ParameterError(f"solimp: need width > 0, 0 < midpoint < 1, power >= 1, got {si}")
        out.geom_solimp[:] = si
        if out.npair:
            out.pair_solimp[:] = si
    if timestep is not None:
        out.opt.timestep = check_positive("timestep", timestep)
    return out
