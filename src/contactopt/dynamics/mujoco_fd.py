"""MuJoCo dynamics for planners: ``x' = f(x, u)`` by ``mj_step``, derivatives by ``mjd_transitionFD``.

State ``x = [qpos (nq), qvel (nv), act (na)]``; derivatives act on the tangent
``dx = [dq (nv), dv (nv), dact (na)]`` (``ndx = 2 nv + na``), exactly the
convention of ``mjd_transitionFD``::

    A_i = ∂(f(x_i ⊕ dx, u_i) ⊖ f(x_i, u_i))/∂dx   (ndx, ndx)
    B_i = ∂(f(x_i, u_i + du) ⊖ f(x_i, u_i))/∂du   (ndx, nu)

Derivatives of the ``T`` steps of a trajectory are independent, so they are
evaluated on a thread pool (one ``MjData`` per share of the steps, each share a
compiled loop over ``mjd_transitionFD`` that runs without the GIL, so the threads
run in parallel; :meth:`MujocoDynamics.derivatives_async` leaves the calling thread
free meanwhile).  Rollouts and the cost's kinematics pass are compiled loops over
the same MuJoCo C functions as well (bit for bit the results of the Python loops).  With ``derivative_stride=k``
only every k-th step (and the last) is differentiated and the others are linearly
interpolated — ``k``× fewer finite differences for slowly varying Jacobians.

The planner's model may differ from the plant's (time step, contact softness,
masses): build it with :func:`contactopt.model.with_timestep` and
:func:`smooth_contacts` and pass it here; the plant keeps its own model.
"""

from __future__ import annotations

import copy
import threading

import mujoco
import numpy as np
from numba import njit as _njit

from ..errors import ParameterError, as_array, check_positive
from ..native import (
    MJSTATE_TIME,
    NATIVE,
    check_compiled_loops,
    load_state,
    mj_differentiatepos,
    mj_setstate,
    mj_step,
    mjd_transitionfd,
    mv,
    np_max,
    np_min,
)
from ..simulate import SimulationError
from .shared import DerivativePool, derivative_indices, interpolate_skipped, thread_count
from .state_space import MujocoStateSpace

__all__ = ["MujocoDynamics", "StepDivergedError", "smooth_contacts"]

# MuJoCo's "simulation is unstable" warnings; after each it resets or zeroes the offending values
_BAD_WARNINGS = (
    int(mujoco.mjtWarning.mjWARN_BADQPOS),
    int(mujoco.mjtWarning.mjWARN_BADQVEL),
    int(mujoco.mjtWarning.mjWARN_BADQACC),
    int(mujoco.mjtWarning.mjWARN_BADCTRL),
)
_BAD_WARNINGS_IDX = np.array(_BAD_WARNINGS, dtype=np.intp)


# =========================================================================== native loops
#
# The per-step loops of a rollout and of the finite differences run as numba kernels that call
# the MuJoCo C functions of :mod:`contactopt.native` (the ``libmujoco`` of the bindings, on the
# ``MjModel``/``MjData`` pointers of the Python objects), so the results are bit for bit those of
# the Python loops, which remain as the reference and the fallback (``NATIVE`` false, or
# ``MujocoDynamics.native = False``).  The kernels are compiled on first use (numba caches them
# next to this module).  One difference: a MuJoCo *fatal* error inside a kernel goes to MuJoCo's
# default handler, which prints it and ends the process, where the Python loop raised
# ``mujoco.FatalError`` (see :mod:`contactopt.native.libmujoco`).

@_njit(cache=True)
def _rollout_kernel(m, d, qpos, qvel, act, ctrl, warnings, bad, U, X_ref, K, feedback, lo, hi, clip,
                    X, Ua):
    """The loop of :meth:`MujocoDynamics.rollout` (same operations): ``X[0]`` and the ``MjData``
    (state, zeroed warm start and warnings) are set by the caller.  Returns the index of the step
    that diverged (rows after it are NaN), or -1."""
    T, nu = U.shape
    nq = qpos.shape[0]
    nv = qvel.shape[0]
    na = act.shape[0]
    dx = np.empty(2 * nv + na)
    dq = np.empty(nv)
    for i in range(T):
        u = U[i].copy()
        if feedback:
            xr = X_ref[i]
            mj_differentiatepos(m, dq.ctypes.data, 1.0, xr.ctypes.data, qpos.ctypes.data)
            for j in range(nv):
                dx[j] = dq[j]
                dx[nv + j] = qvel[j] - xr[nq + j]
            for j in range(na):
                dx[2 * nv + j] = act[j] - xr[nq + nv + j]
            u = u + mv(K[i], dx)
        if clip:
            for j in range(nu):
                u[j] = np_min(np_max(u[j], lo[j]), hi[j])
        for j in range(nu):
            Ua[i, j] = u[j]
            ctrl[j] = u[j]
        mj_step(m, d)
        xi = X[i + 1]
        for j in range(nq):
            xi[j] = qpos[j]
        for j in range(nv):
            xi[nq + j] = qvel[j]
        for j in range(na):
            xi[nq + nv + j] = act[j]
        diverged = False
        for w in bad:
            if warnings[w] != 0:
                diverged = True
        for j in range(nv):
            if not np.isfinite(xi[nq + j]):
                diverged = True
        if diverged:
            X[i + 1:] = np.nan
            Ua[i + 1:] = np.nan
            return i
    return -1


_NO_GAINS = np.zeros((0, 0, 0))
_ZERO_TIME = np.zeros(1)


@_njit(cache=True, nogil=True)
def _fd_kernel(m, d, qpos, qvel, act, ctrl, qacc_warmstart, zero_time, indices, X, U, eps, centered, A, B):
    """The loop of ``MujocoDynamics._fd_worker`` without the GIL: for each step ``i`` in
    ``indices`` load ``X[i]``, ``U[i]``, zero the warm start and the time, and
    ``mjd_transitionFD`` into ``A[i]``, ``B[i]``."""
    nu = ctrl.shape[0]
    for i in indices:
        load_state(X[i], qpos, qvel, act)
        for j in range(nu):
            ctrl[j] = U[i, j]
        qacc_warmstart[:] = 0.0
        mj_setstate(m, d, zero_time.ctypes.data, MJSTATE_TIME)
        mjd_transitionfd(m, d, eps, centered, A[i].ctypes.data, B[i].ctypes.data, 0, 0)




class StepDivergedError(SimulationError, FloatingPointError):
    """:meth:`MujocoDynamics.step` diverged: MuJoCo found qpos/qvel/qacc non-finite or beyond
    1e10 (and reset the state).  Also a ``FloatingPointError``, as it was documented before."""

class MujocoDynamics(MujocoStateSpace, DerivativePool):
    """Discrete dynamics of a MuJoCo model, one ``mj_step`` per step, with FD derivatives.

    Args:
      model: the planner's ``MjModel`` (its ``opt.timestep`` is the step ``h``).  It is
        used read-only and must not be modified while this object is in use.
      nthread: threads for derivatives (default ``$CONTACTOPT_NUM_THREADS``, else ``os.cpu_count()``);
        1 = serial.
      eps: finite-difference step of ``mjd_transitionFD`` (> 0).
      centered: central (True) or forward (False, half the cost) differences.
      derivative_stride: differentiate every k-th step (and the last) and
        interpolate linearly in between (k ≥ 1; 1 = every step).

    Raises:
      ParameterError: a bad argument.
      ModelError: the model would make the compiled loops hit a MuJoCo fatal error (which ends
        the process): an integrator ``mjd_transitionFD`` rejects (RK4: plan on
        :func:`contactopt.model.planner_model_copy`) or a ``<size memory>`` too small for
        ``mj_step`` / ``mjd_transitionFD`` (:func:`contactopt.native.check_compiled_loops`,
        run once here).

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
        # what the rollout and finite-difference loops call, probed once through the bindings
        check_compiled_loops(model, ("step", "transition_fd"), what="MujocoDynamics")
        self._init_state_space(model)
        self.timestep = float(model.opt.timestep)
        self.nthread = thread_count(nthread)
        self.eps = check_positive("eps", eps)
        self.centered = bool(centered)
        if int(derivative_stride) != derivative_stride or derivative_stride < 1:
            raise ParameterError(f"derivative_stride must be an integer >= 1, got {derivative_stride!r}")
        self.derivative_stride = int(derivative_stride)
        self._data = mujoco.MjData(model)
        #: run rollouts and finite differences as compiled loops where available (False: the
        #: Python reference loops; the same results)
        self.native = True
        self._thread_data: list[mujoco.MjData] = []
        self._pending: list | None = None   # futures of a derivatives_async not yet collected

    # ------------------------------------------------------------------ simulation

    def step(self, x, u) -> np.ndarray:
        """One step ``x' = f(x, u)``: ``x (nx,)``, ``u (nu,)`` → ``(nx,)``.

        Raises:
          ContactoptError subclasses for bad input; :class:`StepDivergedError` (a
          ``SimulationError`` and a ``FloatingPointError``) if MuJoCo flags the step as diverged.
        """
        x = as_array("x", x, (self.nx,))
        u = as_array("u", u, (self.nu,))
        r = self.rollout(x, u[None])
        if r.diverged:
            raise StepDivergedError("simulation diverged (MuJoCo reported a bad qpos/qvel/qacc)")
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

        x0, U, X_ref, K, lo, hi = self._rollout_inputs(x0, U, X_ref, K, lower, upper)
        T = U.shape[0]
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
        if NATIVE and self.native:
            feedback = K is not None
            at = _rollout_kernel(
                m._address, d._address, d.qpos, d.qvel, d.act, d.ctrl, warn_count, _BAD_WARNINGS_IDX,
                np.ascontiguousarray(U), np.ascontiguousarray(X_ref) if feedback else X,
                np.ascontiguousarray(K) if feedback else _NO_GAINS, feedback,
                np.ascontiguousarray(np.broadcast_to(lo, (self.nu,)), dtype=float),
                np.ascontiguousarray(np.broadcast_to(hi, (self.nu,)), dtype=float), clip, X, Ua)
            if at >= 0:
                return RolloutResult(X, Ua, True, int(at))
            return RolloutResult(X, Ua)
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
        return derivative_indices(T, self.derivative_stride)

    def _fd_worker(self, j: int, indices, X, U, A, B) -> None:
        d = self._thread_data[j]
        m = self.model
        for i in indices:
            self._set_state(d, X[i])
            d.ctrl[:] = U[i]
            d.qacc_warmstart[:] = 0.0
            d.time = 0.0
            mujoco.mjd_transitionFD(m, d, self.eps, self.centered, A[i], B[i], None, None)

    def derivatives(self, X, U, *, nthread: int | None = None, rows=None) -> tuple[np.ndarray, np.ndarray]:
        """Transition Jacobians along a trajectory.

        Args:
          X: ``(T+1, nx)`` or ``(T, nx)`` states (row ``T`` is ignored).
          U: ``(T, nu)`` controls.
          nthread: override of the thread count for this call (1 = serial).
          rows: optional step indices to differentiate (the others are left zero for the caller
            to fill, e.g. from a previous plan: :class:`~contactopt.mpc.ILQGPlanner`'s
            ``derivative_refresh``); the stride does not apply then.

        Returns:
          ``A (T, ndx, ndx)``, ``B (T, ndx, nu)``; with a stride ``k > 1`` the rows
          between differentiated steps ``a < i < b`` are
          ``(1 − w) A_a + w A_b`` with ``w = (i − a)/(b − a)`` (same for ``B``).
        """
        return self._derivatives(X, U, nthread, background=False, rows=rows)()

    def derivatives_async(self, X, U, *, nthread: int | None = None, rows=None):
        """Start :meth:`derivatives` and return at once, so that the caller can work meanwhile.

        With the compiled loops and ``nthread ≥ 2`` the finite differences run on the worker
        threads without the GIL while the calling thread goes on; otherwise they run when the
        result is asked for.  The result is the same as :meth:`derivatives`'.

        Returns:
          A function of no arguments that waits for and returns ``(A, B)``; it must be called
          (also when the result is not needed) before this object is used again.
        """
        return self._derivatives(X, U, nthread, background=True, rows=rows)

    def _derivatives(self, X, U, nthread, background: bool, rows=None):
        if self._pending:                 # a background computation whose result was not collected
            pending, self._pending = self._pending, None
            for f in pending:
                f.exception()
        X, U, T = self._derivative_inputs(X, U)
        A = np.zeros((T, self.ndx, self.ndx))
        B = np.zeros((T, self.ndx, self.nu))
        if rows is None:
            idx = self.derivative_indices(T)
        else:
            idx = np.unique(np.asarray(rows, dtype=np.intp))
            if idx.size and (idx[0] < 0 or idx[-1] >= T):
                raise ParameterError(f"derivative rows must lie in [0, {T}), got {idx[0]}..{idx[-1]}")
        if idx.size == 0:
            return lambda: (A, B)
        nth = self.nthread if nthread is None else int(nthread)
        nth = max(1, min(nth, len(idx)))
        while len(self._thread_data) < nth:
            self._thread_data.append(mujoco.MjData(self.model))
        native = NATIVE and self.native
        if native:
            m = self.model
            Xc, Uc = np.ascontiguousarray(X), np.ascontiguousarray(U)
            eps, centered = self.eps, int(self.centered)

            def work(j, indices):  # compiled, runs without the GIL
                d = self._thread_data[j]
                _fd_kernel(m._address, d._address, d.qpos, d.qvel, d.act, d.ctrl, d.qacc_warmstart,
                           _ZERO_TIME, np.ascontiguousarray(indices), Xc, Uc, eps, centered, A, B)
        else:
            def work(j, indices):
                self._fd_worker(j, indices, X, U, A, B)

        def interpolate():
            if self.derivative_stride > 1 and rows is None:
                interpolate_skipped(A, B, idx)
            return A, B

        # round-robin shares balance steps with and without contacts; share j always uses
        # MjData j, so the result does not depend on which thread runs it
        if background and native and nth > 1:
            pool = self._ensure_pool(nth)
            started = threading.Semaphore(0)

            def share(j):
                started.release()       # this thread keeps the GIL until the kernel drops it
                work(j, idx[j::nth])

            futures = [pool.submit(share, j) for j in range(nth)]
            self._pending = futures
            for _ in range(nth):        # wait until every share runs (without the GIL)
                started.acquire()

            def finish():
                for f in futures:
                    f.result()
                if self._pending is futures:
                    self._pending = None
                return interpolate()

            return finish

        def run():
            if nth == 1:
                work(0, idx)
            else:
                # shares 1.. on the pool, share 0 on the calling thread
                futures = [self._ensure_pool(nth - 1).submit(work, j, idx[j::nth]) for j in range(1, nth)]
                try:
                    work(0, idx[0::nth])
                finally:
                    for f in futures:
                        f.result()
            return interpolate()

        return run


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
