"""IDTO as an MPC planner: one warm-started trust-region iteration per update, spline + PD policy.

The seed paper's contact-implicit MPC (section VI-D):

* the first plan (:meth:`IDTOPlanner.reset`) runs the solver for ``initial_iterations``;
* every later update (:meth:`IDTOPlanner.update`) measures ``(q, v)`` at time ``t``,
  resamples the previous solution at the new knot times ``t + k h`` (``k = 0 … T``) with
  ``q_guess[0] = q`` (the fixed initial configuration), optionally re-anchors the nominal
  trajectory at the measured state, and runs ``iterations_per_update`` (default 1)
  iterations keeping the trust radius (:meth:`~contactopt.solvers.idto.IDTOSolver.solve_from_warm_start`);
* the plan becomes cubic splines (C², not-a-knot: :class:`UniformCubicSpline`, SciPy's
  ``CubicSpline`` computed with one precomputed matrix product) of ``q``,
  ``v`` and the feedforward control ``u_ff``, tracked between updates at the plant rate by
  :class:`IDTOPolicy`::

      u(t, x) = clip( u_ff(t) + G⁺ [K_p (q_d(t) ⊖ q) + K_d (v_d(t) − v)],  u_min, u_max ),

  where ``G = ∂qfrc_actuator/∂ctrl (nv, nu)`` (gears included) and ``G⁺`` its
  pseudo-inverse, ``u_ff = G⁺ τ`` (the actuated part of the planned generalized force
  mapped to controls), and ``K_p = Ĝ diag(k_p) Ĝᵀ`` with ``Ĝ`` the column-normalized
  ``G`` — i.e. ``k_p (nu,)`` [N·m/rad or N/m] is a stiffness *along each actuator's own
  generalized direction* (for a joint motor: the joint), so the gear is divided out and
  the same gains fit a gear-1 and a gear-100 motor.

The plant is MuJoCo with its own contact; the compliant contact model is only the
planner's.  A failed update (exception, non-finite plan, failed factorization, a cost
blow-up beyond ``divergence_factor``) returns ``PlannerUpdate(None, message=why)``: the runner keeps the last good
policy, and the next update warm-starts from the last good plan again.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import mujoco
import numpy as np

from ..errors import ContactoptError, ParameterError, as_array, check_finite, check_positive
from ..model import MAX_STATE_VALUE, actuation_map, actuator_moment_matrix
from ..solvers.idto import IDTOProblem, IDTOResult, IDTOSettings, IDTOSolver, IDTOStatus
from .lag import LagCompensation, StatePredictor, parse_lag_compensation
from .policy import SplineTrackingPolicy, UniformCubicSpline
from .runner import BREAKDOWN_KEYS, PlannerUpdate
from .sampling import best_perturbed_rollout

#: solver statuses that leave no usable plan (the update fails; the next restarts from the last good one)
_NO_STEP = (IDTOStatus.FACTORIZATION_FAILED, IDTOStatus.NON_FINITE)

__all__ = ["IDTOPolicy", "IDTOPlanner", "UniformCubicSpline", "resample_trajectory", "feedforward_controls",
           "ServoFeedforward"]


# --------------------------------------------------------------------------- helpers


def resample_trajectory(model: mujoco.MjModel, q, t_old: float, h: float, t_new: float) -> np.ndarray:
    """Resample a knot trajectory ``q (T+1, nq)`` at times ``t_old + k h`` onto ``t_new + k h``.

    Piecewise-linear on the configuration manifold, ``q(s) = q_i ⊕ w (q_{i+1} ⊖ q_i)`` with
    ``s = (t_new + k h − t_old)/h = i + w``; before the first knot ``q_0`` and after the
    last knot ``q_T`` are held.  Returns a new ``(T+1, nq)`` array (quaternions normalized).
    """
    q = np.asarray(q, dtype=float)
    T = q.shape[0] - 1
    shift = (t_new - t_old) / h
    if model.nq == model.nv and not np.isin(model.jnt_type, (int(mujoco.mjtJoint.mjJNT_FREE),
                                                             int(mujoco.mjtJoint.mjJNT_BALL))).any():
        # no quaternion: q_i ⊕ w (q_{i+1} ⊖ q_i) is plain linear interpolation
        if T == 0:
            return q.copy()
        s = np.clip(np.arange(T + 1) + shift, 0.0, T)
        i = np.minimum(s.astype(int), T - 1)
        out = q[i] + (s - i)[:, None] * (q[i + 1] - q[i])
        out[s >= T] = q[T]  # held exactly
        return out
    out = np.empty_like(q)
    dq = np.empty(model.nv)
    for k in range(T + 1):
        s = k + shift
        if s <= 0:
            out[k] = q[0]
            continue
        if s >= T:
            out[k] = q[T]
            continue
        i = int(s)
        w = s - i
        out[k] = q[i]
        if w > 0:
            mujoco.mj_differentiatePos(model, dq, 1.0, q[i], q[i + 1])
            mujoco.mj_integratePos(model, out[k], dq, w)
    return out


def feedforward_controls(control_gain: np.ndarray, tau) -> np.ndarray:
    """``u_ff = G⁺ τ`` for ``tau (T, nv)``: the controls whose actuator forces best realize τ.

    For plain motors ``G = B diag(gain)`` and ``G⁺ τ`` picks ``τ_j / gear_j`` on each
    motor's joint; the unactuated part of ``τ`` (in the null space of ``Gᵀ``) is dropped.
    Returns ``(T, nu)``.  (Motors only: :class:`ServoFeedforward` handles servos' bias,
    configuration-dependent moment arms and control limits.)
    """
    return np.asarray(tau, dtype=float) @ np.linalg.pinv(control_gain).T


def _bounded_least_squares(G: np.ndarray, r: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """``u`` with ``lower ≤ u ≤ upper`` that nearly minimizes ``‖G u − r‖`` (``G (nv, nu)``, ``r (nv,)``).

    Active set without release: solve the minimum-norm least squares on the free controls,
    fix every one outside its bounds at the bound it crossed, repeat (at most ``nu`` times).
    Exact when no bound is active; with antagonistic actuators (a pull-only flexor and
    extensor on one joint) it moves the torque the minimum-norm split gave the wrong muscle
    onto the other one instead of clipping it away.
    """
    nu = G.shape[1]
    u = np.zeros(nu)
    free = np.ones(nu, dtype=bool)
    for _ in range(nu + 1):
        rest = r - G[:, ~free] @ u[~free]
        u[free] = np.linalg.lstsq(G[:, free], rest, rcond=None)[0] if free.any() else 0.0
        low, high = free & (u < lower - 1e-12), free & (u > upper + 1e-12)
        if not (low.any() or high.any()):
            break
        u[low], u[high] = lower[low], upper[high]
        free &= ~(low | high)
    return u


class ServoFeedforward:
    """Planned generalized forces → controls for any affine actuator, servos and tendons included.

    IDTO's ``τ_t`` is the generalized force at step ``t``'s end state ``(q_{t+1}, v_{t+1})``.
    An actuator without activation dynamics produces ``f_i = g_i(l, l̇) u_i + b_i(l, l̇)``
    (MuJoCo's affine gain and bias: ``g = gainprm₀ + gainprm₁ l + gainprm₂ l̇``, ``b = biasprm₀ +
    biasprm₁ l + biasprm₂ l̇``; a position servo has ``b = −k_p l − k_v l̇``, a velocity servo
    ``b = −k_v l̇``) and ``qfrc_actuator = B(q) f`` with ``B`` the transposed moment matrix, so::

        u_t = argmin_{u_min ≤ u ≤ u_max} ‖ B(q_{t+1}) diag(g) u − (τ_t − B(q_{t+1}) b) ‖²

    with ``l = actuator lengths at q_{t+1}`` and ``l̇ = Bᵀ v_{t+1}``.  For a position servo this is
    ``u = q_{t+1} + (τ_t + k_v v_{t+1}) / k_p``: the plan's next configuration plus the offset
    that makes the servo push ``τ_t`` — the plant's own servo then tracks the plan.

    Models of plain motors on joints (fixed gain, no bias, constant moment arms, no active control
    limit) take the constant map ``G⁺`` (:func:`feedforward_controls`) — the same numbers; the
    general path evaluates ``B`` and the lengths at every knot (``mj_fwdPosition``).

    Args:
      model: the plant's model (its actuators are what the controls drive).
    """

    def __init__(self, model: mujoco.MjModel):
        self.model = model
        nu = model.nu
        self.data = mujoco.MjData(model)
        joint_trn = np.isin(model.actuator_trntype, [int(mujoco.mjtTrn.mjTRN_JOINT),
                                                     int(mujoco.mjtTrn.mjTRN_JOINTINPARENT)])
        no_dyn = model.actuator_dyntype == int(mujoco.mjtDyn.mjDYN_NONE)
        affine_gain = np.isin(model.actuator_gaintype, [int(mujoco.mjtGain.mjGAIN_FIXED),
                                                        int(mujoco.mjtGain.mjGAIN_AFFINE)])
        self._usable = no_dyn & affine_gain  # other actuators get no feedforward (zero gain)
        self._affine_bias = model.actuator_biastype == int(mujoco.mjtBias.mjBIAS_AFFINE)
        limited = model.actuator_ctrllimited.astype(bool)
        self.lower = np.where(limited, model.actuator_ctrlrange[:, 0], -np.inf)
        self.upper = np.where(limited, model.actuator_ctrlrange[:, 1], np.inf)
        plain = (np.all(joint_trn) and np.all(model.actuator_gaintype == int(mujoco.mjtGain.mjGAIN_FIXED))
                 and not np.any(self._affine_bias))
        self.constant = bool(plain)
        self.ff_map = np.linalg.pinv(actuation_map(model).control_gain).T if nu else np.zeros((model.nv, 0))
        # pull-only / push-only actuators sharing a joint: the minimum-norm split would ask one of
        # them for a force of the wrong sign, so the bounded solve is needed even for motors
        self._bounded = bool(np.any(limited & ((model.actuator_ctrlrange[:, 0] >= 0)
                                               | (model.actuator_ctrlrange[:, 1] <= 0))))
        if self._bounded:
            self.constant = False

    def __call__(self, q, v, tau) -> np.ndarray:
        """Controls ``(T, nu)`` for the plan ``q (T+1, nq)``, ``v (T+1, nv)``, ``tau (T, nv)``."""
        tau = np.asarray(tau, dtype=float)
        if self.constant:
            return tau @ self.ff_map
        m, d = self.model, self.data
        T = tau.shape[0]
        out = np.zeros((T, m.nu))
        prm_g, prm_b = m.actuator_gainprm, m.actuator_biasprm
        for t in range(T):
            d.qpos[:] = q[t + 1]
            mujoco.mj_fwdPosition(m, d)
            B = actuator_moment_matrix(m, d).T  # (nv, nu)
            length = d.actuator_length
            speed = B.T @ v[t + 1]
            gain = np.where(self._usable, prm_g[:, 0] + np.where(
                m.actuator_gaintype == int(mujoco.mjtGain.mjGAIN_AFFINE),
                prm_g[:, 1] * length + prm_g[:, 2] * speed, 0.0), 0.0)
            bias = np.where(self._affine_bias, prm_b[:, 0] + prm_b[:, 1] * length + prm_b[:, 2] * speed, 0.0)
            out[t] = _bounded_least_squares(B * gain[None, :], tau[t] - B @ bias, self.lower, self.upper)
        return out


# --------------------------------------------------------------------------- policy
# (the spline and the tracking law it shares with the remote client: mpc/policy.py)


class IDTOPolicy(SplineTrackingPolicy):
    """Cubic-spline plan tracked by PD + feedforward (module docstring).

    Args:
      model: model of the plant's configuration space (``nq``, ``nv``, ``nu`` and actuation).
      t0: time [s] of the plan's first knot (the state it was planned from).
      timestep: knot spacing ``h`` [s].
      q: ``(T+1, nq)`` planned configurations; v: ``(T+1, nv)`` planned velocities [1/s];
      u_ff: ``(T, nu)`` feedforward controls, ``u_ff[t]`` at knot ``t`` (the last one is
        repeated at knot ``T``).
      kp, kd: ``(nu,)`` (or scalar) stiffness [N·m/rad] and damping [N·m·s/rad] along each
        actuator's generalized direction (see the module docstring).
      lower, upper: ``(nu,)`` control limits (default: the model's ctrlrange where limited).

    After the last knot ``q_d``, ``v_d`` and ``u_ff`` are held at their final values; before
    ``t0`` the first knot is used.  ``control(t, None)`` is the clipped feedforward.
    """

    def __init__(self, model: mujoco.MjModel, t0: float, timestep: float, q, v, u_ff, kp=0.0, kd=0.0,
                 lower=None, upper=None, *, _gains=None):
        if not (math.isfinite(timestep) and timestep > 0):
            raise ParameterError(f"IDTOPolicy: timestep must be positive, got {timestep!r}")
        self.model = model
        self.t0 = check_finite("t0", t0)
        self.h = float(timestep)
        nq, nv, nu = model.nq, model.nv, model.nu
        self.nq, self.nv, self.nu = nq, nv, nu
        self.q = as_array("q", q, (None, nq))
        T = self.q.shape[0] - 1
        if T < 1:
            raise ParameterError("IDTOPolicy: a plan needs at least two knots")
        self.v = as_array("v", v, (T + 1, nv))
        self.u = as_array("u_ff", u_ff, (T, nu))
        self.T = T
        if _gains is None:
            _gains = IDTOPolicy.gains(model, kp, kd, lower, upper)
        self.G_pinv, self.Kp, self.Kd, self.lower, self.upper = _gains
        self._set_plan(self.q, self.v, self.u)

    @staticmethod
    def gains(model: mujoco.MjModel, kp=0.0, kd=0.0, lower=None, upper=None):
        """``(G⁺ (nu, nv), K_p (nu, nv), K_d (nu, nv), lower (nu,), upper (nu,))`` of the policy law.

        Depends only on the model's actuation, the gains and the limits, so a planner computes it
        once and passes it to every new policy (``_gains=``).
        """
        nu = model.nu
        G = actuation_map(model).control_gain  # (nv, nu)
        G_pinv = np.linalg.pinv(G)  # (nu, nv)
        norms = np.linalg.norm(G, axis=0)
        Ghat = G / np.where(norms > 0, norms, 1.0)
        kp = np.broadcast_to(np.asarray(kp, dtype=float), (nu,))
        kd = np.broadcast_to(np.asarray(kd, dtype=float), (nu,))
        if np.any(kp < 0) or np.any(kd < 0) or not (np.isfinite(kp).all() and np.isfinite(kd).all()):
            raise ParameterError(f"IDTOPolicy: gains must be finite and >= 0, got kp={kp}, kd={kd}")
        # u feedback = G⁺ Ĝ diag(k) Ĝᵀ e  →  precomputed (nu, nv) matrices
        Kp = G_pinv @ Ghat @ np.diag(kp) @ Ghat.T
        Kd = G_pinv @ Ghat @ np.diag(kd) @ Ghat.T
        lo_m = np.where(model.actuator_ctrllimited.astype(bool), model.actuator_ctrlrange[:, 0], -np.inf)
        hi_m = np.where(model.actuator_ctrllimited.astype(bool), model.actuator_ctrlrange[:, 1], np.inf)
        lower = lo_m if lower is None else np.broadcast_to(np.asarray(lower, float), (nu,))
        upper = hi_m if upper is None else np.broadcast_to(np.asarray(upper, float), (nu,))
        return G_pinv, Kp, Kd, lower, upper

    def _normalize(self, q: np.ndarray) -> None:
        mujoco.mj_normalizeQuat(self.model, q)

    def _difference(self, q: np.ndarray, q_target: np.ndarray, out: np.ndarray) -> None:
        mujoco.mj_differentiatePos(self.model, out, 1.0, q, q_target)


# --------------------------------------------------------------------------- planner


NominalFn = Callable[[float, np.ndarray], tuple]


class IDTOPlanner(LagCompensation):
    """Receding-horizon IDTO (implements the runner's ``Planner`` protocol).

    Args:
      problem: the :class:`~contactopt.solvers.idto.IDTOProblem` (its model has the plant's
        ``nq``/``nv``/``nu``; its ``q_init``/``v_init`` and nominal are overwritten at every update).
      plant_model: model for the policy's actuation and control limits (default ``problem.model``).
      options: :class:`~contactopt.solvers.idto.IDTOSettings` (convergence tests off for MPC updates
        is typical; ``initial_iterations`` caps the first solve).
      initial_iterations: iterations of the first plan (:meth:`reset`).
      iterations_per_update: iterations per MPC update (≥ 1; the paper uses 1).
      nominal: optional ``nominal(t, x) -> (q_nom, v_nom)`` re-anchoring the target at the
        measured state ``x = [qpos, qvel]`` (arrays as :meth:`IDTOProblem.set_nominal` takes;
        ``v_nom`` may be None).  Called at :meth:`reset` and at every update, except that the
        first update after a reset, when it plans from the reset's very ``(t, x)`` (the runner's
        first update does), reuses the reset's rows: a nominal that keeps state between calls
        (e.g. inverse kinematics warm-started from its last solution) would otherwise give that
        plan other rows.  Any other update calls it (a paused plant's goals may change).
      initial_guess: optional ``initial_guess(t, x) -> q (T+1, nq)`` for :meth:`reset`
        (default: ``q`` held constant).  Row 0 is replaced by the measured ``q``.
      kp, kd: policy gains (``(nu,)`` or scalar, see :class:`IDTOPolicy`).
      divergence_factor: a warm update whose planned cost exceeds this times the larger of the
        previous plan's cost and the last cold plan's (:meth:`reset`) is treated as diverged
        (∞ = never); a cold plan is never refused for its cost (a new baseline: a moved goal or
        a push may raise the cost for good).

    After a failed update the next one restarts from the last good plan with a fresh trust
    radius; when that fails too (two failures in a row), or at once when the solve could not
    even linearize its guess (``IDTOStatus.NON_FINITE``: the last plan resampled overflows),
    the next update is a cold :meth:`reset` from the measured state — a warm start from a plan
    that cannot be repaired would fail for ever.
      restart_radius: the trust radius ``Δ`` (scaled units, > 0) the next update starts from
        after a solve whose radius collapsed (every converged first plan ends so) or that
        failed; default ``options.initial_radius`` (where that is None, each restart scales the
        radius to the problem again: its first Gauss–Newton step).  A cold solve wants a large ``Δ_0``, the
        warm-started updates of a task with a fragile balance may want a small one
        (the IDTO hopper: ``Δ_0`` 10, restart 0.1).
      samples: after each update, roll out this many smooth perturbations of the plan's
        controls through MuJoCo and restart from the best when it is cheaper (:meth:`_sample`):
        the escape from local minima of :class:`~contactopt.mpc.ILQGPlanner`'s ``samples``,
        for IDTO.  0 (default) = plain IDTO.
      sample_cost: the :class:`~contactopt.costs.TrajectoryCost` that ranks the rollouts (the
        task's cost on the problem's model; required with ``samples``).
      sample_scale, sample_knots: the perturbations' standard deviation (× each control's range)
        and knots over the horizon.
      sample_iterations: iterations of the solve that restarts from a winning rollout.
      lag_compensation: None / 0 / ``"off"`` (the default), seconds ``L_pred > 0`` or ``"auto"``:
        each update plans from the state predicted at ``t + L_pred`` (:mod:`contactopt.mpc.lag`)
        by stepping ``plant_model`` with MuJoCo at its own time step under the policy in force
        (PD + feedforward, as the plant applies it; ``L_pred`` rounded up to a whole number of
        those steps, as the plant switches policies at its steps), and the plan starts at that
        time.  With ``align_to_knots`` the prediction runs on to the previous plan's next knot
        instead (off by default: where the plant's steps do not fall on the knots, that knot lies
        beyond the moment the new policy takes effect; docs/experiments/idto-lag-compensation.md).
        A prediction that is not finite falls back to the measured state.

    Breakdown reported per update (seconds, the shared keys of
    :meth:`~contactopt.solvers.idto.IDTOResult.timing`): ``derivatives`` (residual + Jacobian),
    ``solve`` (Hessian assembly, Cholesky, dogleg), ``line_search`` (trial evaluations); the
    rest of the update's wall time (resampling, splines) is ``compute_time`` minus their sum.
    The message is the status name (``status.name``).
    """

    def __init__(self, problem: IDTOProblem, *, plant_model: mujoco.MjModel | None = None,
                 options: IDTOSettings | None = None, initial_iterations: int = 30,
                 iterations_per_update: int = 1, nominal: NominalFn | None = None,
                 initial_guess: Callable | None = None, kp=0.0, kd=0.0,
                 divergence_factor: float = math.inf, restart_radius: float | None = None,
                 samples: int = 0, sample_cost=None, sample_scale: float = 0.5, sample_knots: int = 4,
                 sample_iterations: int = 5, lag_compensation=None, align_to_knots: bool = False):
        if not isinstance(problem, IDTOProblem):
            raise ParameterError(f"IDTOPlanner: problem must be an IDTOProblem, got {type(problem).__name__}")
        for name, v in (("initial_iterations", initial_iterations), ("iterations_per_update", iterations_per_update)):
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {v!r}")
        if options is None:
            options = IDTOSettings(convergence=None)
        self.problem = problem
        self.solver = IDTOSolver(problem, options)
        self.model = problem.model if plant_model is None else plant_model
        if (self.model.nq, self.model.nv) != (problem.nq, problem.nv):
            raise ParameterError(f"IDTOPlanner: plant model (nq {self.model.nq}, nv {self.model.nv}) does not "
                                 f"match the problem's (nq {problem.nq}, nv {problem.nv})")
        self.initial_iterations = int(initial_iterations)
        self.iterations_per_update = int(iterations_per_update)
        self.nominal = nominal
        self.initial_guess = initial_guess
        self.kp, self.kd = kp, kd
        self.divergence_factor = float(divergence_factor)
        if not self.divergence_factor > 1.0:  # NaN included
            raise ParameterError(f"divergence_factor must be > 1 (or inf: never), got {divergence_factor!r}")
        self.restart_radius = (options.initial_radius if restart_radius is None
                               else check_positive("restart_radius", restart_radius))
        self.h, self.T = problem.h, problem.T
        self.control_gain = actuation_map(self.model).control_gain
        self._gains = IDTOPolicy.gains(self.model, kp, kd)
        self._gains_key = self._key()
        self.feedforward = ServoFeedforward(self.model)
        self.result: IDTOResult | None = None
        self.t_plan = 0.0
        self.policy: IDTOPolicy | None = None
        if isinstance(samples, bool) or int(samples) != samples or samples < 0:
            raise ParameterError(f"samples must be an integer >= 0, got {samples!r}")
        if samples and sample_cost is None:
            raise ParameterError("samples > 0 needs sample_cost, the TrajectoryCost that ranks the samples")
        self.samples, self.sample_cost = int(samples), sample_cost
        self.sample_scale, self.sample_knots = float(sample_scale), int(sample_knots)
        if isinstance(sample_iterations, bool) or int(sample_iterations) != sample_iterations or sample_iterations < 1:
            raise ParameterError(f"sample_iterations must be an integer >= 1, got {sample_iterations!r}")
        self.sample_iterations = int(sample_iterations)
        self._sampler = None
        self._failures_in_row = 0
        self._cold_restart = False
        self._nominal_at: tuple | None = None  # ((t, x bytes), rows) of the reset, until reused
        self._reset_cost = 0.0  # the last cold plan's cost: a floor of the divergence test's baseline
        self.lag_compensation = parse_lag_compensation(lag_compensation)
        self.align_to_knots = bool(align_to_knots)
        self.horizon_seconds = self.T * self.h  # the plan's span (lag compensation)
        self.observed_lag: float | None = None       # the runner's last measured policy lag (s)
        self.last_compute_time: float | None = None  # wall seconds of the last update
        self.last_prediction: tuple | None = None    # (t, t_pred, x_pred) of the last compensated update
        self._predictor: StatePredictor | None = None
        self.seed(0)

    def seed(self, seed: int) -> None:
        """Seed the sampled perturbations (``samples > 0``)."""
        self._rng = np.random.default_rng(seed)

    def _sample(self, res: IDTOResult) -> IDTOResult:
        """Sampling escape (``samples > 0``): roll the problem's model (MuJoCo, step ``h``) out from
        the measured state under ``samples`` smooth perturbations of the plan's controls
        (:func:`~contactopt.mpc.sampling.best_perturbed_rollout`), rank them by ``sample_cost`` (the
        task's shared cost) against the open-loop rollout of the plan's own controls, and when a
        rollout is cheaper re-solve from its configurations (a dynamically consistent guess) with
        ``sample_iterations`` iterations; the new plan is kept when its IDTO cost is lower."""
        from ..dynamics import MujocoDynamics

        if self._sampler is None:
            self._sampler = MujocoDynamics(self.problem.model)
        dyn, cost = self._sampler, self.sample_cost
        U = np.clip(self.feedforward(res.q, res.v, res.tau), dyn.control_lower, dyn.control_upper)
        nq, nv = self.problem.nq, self.problem.nv
        x0 = np.zeros(dyn.nx)
        x0[:nq], x0[nq:nq + nv] = res.q[0], self.problem.v_init
        plan = dyn.rollout(x0, U)
        bar = float(cost.total(plan.X, U)) if not plan.diverged else math.inf
        best = best_perturbed_rollout(dyn, cost, x0, U, dyn.control_lower, dyn.control_upper, self._rng,
                                      samples=self.samples, scale=self.sample_scale, knots=self.sample_knots,
                                      bar=bar)
        if best is None:
            return res
        best_q = best[2][:, :nq]
        radius = self.solver.trust_radius
        new = self.solver.solve(best_q, max_iterations=self.sample_iterations)
        if new.status not in _NO_STEP and new.cost < res.cost:
            return new
        self.solver.trust_radius = radius
        return res

    # ------------------------------------------------------------------ pieces

    def _key(self):
        return (np.asarray(self.kp, dtype=float).tobytes(), np.asarray(self.kd, dtype=float).tobytes())

    def _schedule_cost(self, t: float, x) -> None:
        """Moving targets of the shared cost at this plan's knot times ``t + k h``, ``k = 0 … T``
        (:meth:`TrajectoryCost.schedule <contactopt.costs.TrajectoryCost.schedule>`): the cost
        of the general knot rows and the one that ranks the samples (one object when both)."""
        costs = [getattr(getattr(self.problem, "knot_cost", None), "cost", None), self.sample_cost]
        done = []
        for cost in costs:
            if cost is not None and hasattr(cost, "schedule") and all(cost is not c for c in done):
                cost.schedule(t, np.asarray(x, dtype=float), self.T + 1)
                done.append(cost)

    def _measure(self, t, x, *, reset: bool = False):
        nq, nv = self.problem.nq, self.problem.nv
        x = as_array("x", x, (None,), max_abs=MAX_STATE_VALUE)  # MuJoCo resets states beyond 1e10
        if x.size < nq + nv:
            raise ParameterError(f"IDTOPlanner: state has {x.size} entries, needs qpos + qvel = {nq + nv}")
        q, v = x[:nq].copy(), x[nq:nq + nv].copy()
        self.problem.set_initial_state(q, v)
        if self.nominal is not None:
            key, at_reset = (float(t), x.tobytes()), self._nominal_at
            self._nominal_at = None
            if at_reset is not None and at_reset[0] == key:
                rows = at_reset[1]  # the first update from the reset's own state
            else:
                rows = self.nominal(float(t), x)
                if reset:
                    self._nominal_at = (key, rows)
            self.problem.set_nominal(*rows)
        return self.problem.q_init

    def shifted_guess(self, t: float, q_meas) -> np.ndarray:
        """The previous plan resampled at ``t + k h`` with row 0 the measured ``q_meas``."""
        if self.result is None:
            raise ContactoptError("IDTOPlanner: no previous plan to shift (call reset first)")
        q = resample_trajectory(self.problem.model, self.result.q, self.t_plan, self.h, t)
        q[0] = q_meas
        return q

    @staticmethod
    def _breakdown(res: IDTOResult) -> dict:
        timing = res.timing()
        return {k: timing[k] for k in BREAKDOWN_KEYS}

    def _finish(self, t: float, res: IDTOResult, start: float, *, cold: bool = False) -> PlannerUpdate:
        ok, why = True, res.status.name
        if res.status is IDTOStatus.TRUST_REGION_COLLAPSED:
            # no decrease found: the plan is still the best known (finite, checked below), but a
            # collapsed radius would freeze every later warm start, so it restarts.
            self.solver.trust_radius = self.restart_radius
        if res.status in _NO_STEP:
            ok, why = False, f"IDTO {res.status.name}"
        elif not (np.isfinite(res.q).all() and np.isfinite(res.v).all() and np.isfinite(res.tau).all()
                  and math.isfinite(res.cost)):
            ok, why = False, "IDTO plan is not finite"
        elif (not cold and self.result is not None and math.isfinite(self.divergence_factor)
              and res.cost > self.divergence_factor * max(self.result.cost, self._reset_cost, 1e-12)):
            ok, why = False, (f"IDTO diverged: cost {res.cost:.4g} > {self.divergence_factor:g} × "
                              f"{max(self.result.cost, self._reset_cost):.4g}")
        if not ok:
            # next update restarts from the last good plan with a fresh trust radius; after a
            # second failure in a row, or a guess that cannot be linearized, from scratch
            self.solver.trust_radius = self.restart_radius
            self._failures_in_row += 1
            if res.status is IDTOStatus.NON_FINITE or self._failures_in_row >= 2:
                self._cold_restart = True
            wall = time.perf_counter() - start
            return PlannerUpdate(None, float(res.cost), res.iterations, wall, self._breakdown(res), why)
        if self._key() != self._gains_key:  # kp / kd changed since the last plan
            self._gains, self._gains_key = IDTOPolicy.gains(self.model, self.kp, self.kd), self._key()
        policy = IDTOPolicy(self.model, t, self.h, res.q, res.v, self.feedforward(res.q, res.v, res.tau),
                            self.kp, self.kd,
                            _gains=self._gains)
        self.result, self.t_plan, self.policy = res, float(t), policy
        self._failures_in_row, self._cold_restart = 0, False
        if cold:
            self._reset_cost = float(res.cost)
        wall = time.perf_counter() - start
        return PlannerUpdate(policy, float(res.cost), res.iterations, wall, self._breakdown(res), why)

    # ------------------------------------------------------------------ protocol

    def close(self) -> None:
        """Release the problem's Jacobian thread pool (and the sampler's)."""
        self.problem.close()
        if self._sampler is not None:
            self._sampler.close()

    def reset(self, t: float, x) -> PlannerUpdate:
        """First plan from state ``x`` at time ``t`` (``initial_iterations`` iterations, fresh radius)."""
        t = check_finite("t", t)
        start = time.perf_counter()
        self._schedule_cost(t, x)  # outside the try: a reference that raises is the user's error
        try:
            q0 = self._measure(t, x, reset=True)
            if self.initial_guess is not None:
                qg = as_array("initial_guess", self.initial_guess(float(t), np.asarray(x)),
                              (self.T + 1, self.problem.nq)).copy()
            else:
                qg = np.tile(q0, (self.T + 1, 1))
            qg[0] = q0
            res = self.solver.solve(qg, max_iterations=self.initial_iterations)
        except (ContactoptError, FloatingPointError, np.linalg.LinAlgError) as exc:
            return PlannerUpdate(None, compute_time=time.perf_counter() - start, message=f"IDTO reset failed: {exc}")
        return self._finish(t, res, start, cold=True)

    def predict(self, t: float, x, lag: float) -> np.ndarray | None:
        """``[qpos, qvel]`` at ``t + lag`` from ``x`` at ``t``: ``plant_model`` stepped by MuJoCo at
        its own time step under the policy in force (None without one, or when not finite)."""
        policy = self.policy
        if policy is None:
            return None
        if self._predictor is None:
            self._predictor = StatePredictor(self.model, self.model.opt.timestep)
        nq, nv = self.problem.nq, self.problem.nv
        x = np.asarray(x, dtype=float)
        return self._predictor.predict(t, x[:nq + nv], lag, policy.control)

    def _compensate(self, t: float, x):
        """``(t, x)`` to plan from: the measured pair, or with lag compensation the predicted one."""
        xa = np.asarray(x, dtype=float).ravel()
        if xa.size < self.problem.nq + self.problem.nv or not np.all(np.abs(xa) < MAX_STATE_VALUE):
            return t, x  # a bad measurement: the update reports it (``_measure``)
        lag = self.prediction_lag()
        if lag > 0 and self.align_to_knots:
            lag = self.knot_aligned_lag(t, lag)
        elif lag > 0:
            # the plant switches policies only at its own steps: the first one at or after t + lag
            dt = self.model.opt.timestep
            lag = min(math.ceil(lag / dt - 1e-9) * dt, self.horizon_seconds)
        if lag > 0:
            x_pred = self.predict(t, xa, lag)
            if x_pred is not None and np.all(np.abs(x_pred) < MAX_STATE_VALUE):
                self.last_prediction = (t, t + lag, x_pred)
                return t + lag, x_pred
        return t, x

    def update(self, t: float, x) -> PlannerUpdate:
        """One receding-horizon update from the state ``x`` measured at time ``t`` (with lag
        compensation: from the state predicted at ``t + L_pred``, the returned policy's start)."""
        t = check_finite("t", t)
        if self.result is None or self._cold_restart:
            upd = self.reset(t, x)
            self.last_compute_time = upd.compute_time
            return upd
        start = time.perf_counter()
        if self.lag_compensation is not None:
            t, x = self._compensate(t, x)
        self._schedule_cost(t, x)
        try:
            q0 = self._measure(t, x)
            qg = self.shifted_guess(t, q0)
            res = self.solver.solve_from_warm_start(qg, max_iterations=self.iterations_per_update)
            if self.samples and np.isfinite(res.q).all() and math.isfinite(res.cost):
                res = self._sample(res)
        except (ContactoptError, FloatingPointError, np.linalg.LinAlgError) as exc:
            self._failures_in_row += 1
            self._cold_restart = self._failures_in_row >= 2
            self.last_compute_time = time.perf_counter() - start
            return PlannerUpdate(None, compute_time=self.last_compute_time, message=f"IDTO update failed: {exc}")
        upd = self._finish(t, res, start)
        self.last_compute_time = upd.compute_time
        return upd
