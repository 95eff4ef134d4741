"""iLQG as an MPC planner: warm-started receding-horizon updates with feedback policies."""

from __future__ import annotations

import math
import time

import numpy as np

from ..errors import ContactoptError, ParameterError, check_finite
from ..solvers.ilqg import ILQG, ILQGResult, ILQGSettings
from .lag import LagCompensation, StatePredictor, parse_lag_compensation
from .policy import TrajectoryPolicy
from .runner import BREAKDOWN_KEYS, PlannerUpdate
from .sampling import best_perturbed_rollout

__all__ = ["ILQGPlanner"]


class ILQGPlanner(LagCompensation):
    """Receding-horizon iLQG (the seed paper's MPC loop).

    Each update shifts the previous plan to the measured time (``shift = (t − t_prev)/h``
    planner steps, :func:`~contactopt.solvers.ilqg.shift_plan`), rolls it out from the
    measured state under its own feedback gains, and runs ``iterations_per_update``
    iLQG iterations starting from the previous μ.  The resulting policy is
    ``u = U(t) + K(t)(x ⊖ X(t))`` (:class:`~contactopt.mpc.policy.TrajectoryPolicy`).
    A diverged or failed update returns no policy (the runner keeps the old one) and the
    next update warm-starts from the last good plan again.

    **Lag compensation** (opt-in, ``lag_compensation``): a policy planned from the state
    measured at ``t`` reaches the plant only at ``t + L`` (the policy lag); meanwhile the
    plant keeps applying the previous policy.  With compensation, each update first
    predicts the state at ``t + L_pred`` by simulating the planner model from the measured
    state under the previous policy (the control law the plant applies, evaluated every
    ``h / lag_substeps``; ``lag_prediction="feedforward"``: its open-loop part only), then
    plans from that predicted state and time: the returned policy starts at ``t + L_pred``
    (it is indexed by absolute time, so the plant applies the right part of it whenever it
    takes effect).  ``L_pred`` is a fixed number of seconds, or ``"auto"``: the shortest lag the
    runner reported through :meth:`observe_lag` over the last
    :data:`~contactopt.mpc.lag.AUTO_LAG_WINDOW` updates, else the previous update's wall time
    (the shortest, because a policy that takes effect after its start is applied from the right
    knot, and one that takes effect before it is not: :mod:`contactopt.mpc.lag`).  With
    ``align_to_knots`` (the default) the prediction runs on to the previous plan's first knot
    at or after ``t + L_pred``, so the new plan starts on the old plan's time grid and the
    warm start shifts it by a whole number of steps: a fractional shift blends neighbouring controls (linear interpolation),
    and repeated every update that blending smears the plan's impulses (replanning every 5 ms
    on 10 ms steps, the hopper shuffled at 0.1 m/s instead of hopping at 0.4 m/s).  If the
    prediction diverges the update plans from the measured state.

    Args:
      dynamics: planner dynamics (e.g. :class:`~contactopt.dynamics.MujocoDynamics`) with
        ``model`` and ``timestep`` attributes; its state must be the plant's ``[qpos, qvel, act]``.
      cost: the trajectory cost (same time step).
      horizon: planner steps ``T`` (≥ 1).
      settings: :class:`~contactopt.solvers.ilqg.ILQGSettings`.
      iterations_per_update: iLQG iterations per MPC update (≥ 1).
      initial_iterations: iterations of the first plan (:meth:`reset`).
      nominal_control: ``(nu,)`` control the first plan starts from (default zeros).
      control_lower, control_upper: extra control limits (see :class:`~contactopt.solvers.ilqg.ILQG`).
      lag_compensation: None / 0 (off, the default), seconds ``L_pred > 0``, or ``"auto"``.
      lag_prediction: ``"feedback"`` (the previous policy with its gains, as the plant
        applies it) or ``"feedforward"`` (its open-loop controls only).
      lag_substeps: prediction steps per planner step (≥ 1): with ``h / plant step`` the
        prediction evaluates the policy as often as the plant does.
      align_to_knots: with lag compensation, predict on to the previous plan's next knot (above).
      samples: after each update's iLQG iterations, roll out this many perturbed copies of the
        plan's controls (open loop) and restart from the best one when it costs less than the
        plan (one iLQG iteration from it): a sampling escape from local minima such as a
        torque-limited swing-up stuck pushing one way (iLQG + sampling, as MJPC's iLQS).
        0 (default) = plain iLQG.  The perturbations are smooth: Gaussian values at
        ``sample_knots`` knots over the horizon, linearly interpolated, with standard
        deviation ``sample_scale`` × each control's range (× 2 for an unlimited control),
        clipped to the limits; :meth:`seed` seeds them.
      derivative_refresh: fraction ``ρ ∈ (0, 1]`` of the horizon's steps whose dynamics Jacobians
        an update differentiates (1, the default: all).  Below 1 the others are reused from the
        previous update at the same absolute time (row ``i + round(shift)`` of its ``A``, ``B``),
        choosing for recomputation first the ``s`` steps the previous plan did not cover (``s``
        the shift in knots), then the oldest Jacobians (earlier steps first among equals), so
        that no Jacobian is more than ``⌈(T − s)/(⌈ρT⌉ − s)⌉ − 1`` updates old (ρ = 0.5 and
        ``s`` small against ``T``: one update).  ``ρ = 0.5`` halves the finite differences; unlike
        a ``derivative_stride`` (interpolation between differentiated steps, which blends the
        flight and stance Jacobians of a contact step) every row is a true Jacobian of a recent
        trajectory.  Iterations after an update's first one differentiate every step.
    """

    def __init__(self, dynamics, cost, horizon: int, *, settings: ILQGSettings | None = None,
                 iterations_per_update: int = 1, initial_iterations: int = 30, nominal_control=None,
                 control_lower=None, control_upper=None, lag_compensation=None,
                 lag_prediction: str = "feedback", lag_substeps: int = 1, samples: int = 0,
                 sample_scale: float = 0.5, sample_knots: int = 4, align_to_knots: bool = True,
                 derivative_refresh: float = 1.0):
        for name, v in (("horizon", horizon), ("iterations_per_update", iterations_per_update),
                        ("initial_iterations", initial_iterations)):
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {v!r}")
        self.solver = ILQG(dynamics, cost, settings, control_lower=control_lower, control_upper=control_upper)
        self.dynamics = dynamics
        self.model = dynamics.model
        self.h = float(dynamics.timestep)
        self.horizon = int(horizon)
        self.horizon_seconds = self.horizon * self.h  # the plan's span (lag compensation)
        self.iterations_per_update = int(iterations_per_update)
        self.initial_iterations = int(initial_iterations)
        nu = dynamics.nu
        u0 = np.zeros(nu) if nominal_control is None else np.asarray(nominal_control, float).reshape(nu)
        self.nominal = np.clip(u0, self.solver.control_lower, self.solver.control_upper)
        self.result: ILQGResult | None = None
        self.t_plan = 0.0
        self.policy: TrajectoryPolicy | None = None  # the last policy handed out (in force at the plant)
        self.observed_lag: float | None = None       # the runner's last measured policy lag (s)
        self.last_compute_time: float | None = None  # wall seconds of the last update
        self.last_prediction: tuple | None = None    # (t, t_pred, x_pred) of the last compensated update
        self._predictor: StatePredictor | None = None
        self.set_lag_compensation(lag_compensation, prediction=lag_prediction, substeps=lag_substeps)
        self.align_to_knots = bool(align_to_knots)
        for name, v, least in (("samples", samples, 0), ("sample_knots", sample_knots, 2)):
            if isinstance(v, bool) or int(v) != v or v < least:
                raise ParameterError(f"{name} must be an integer >= {least}, got {v!r}")
        if not (isinstance(sample_scale, (int, float)) and math.isfinite(sample_scale) and sample_scale > 0):
            raise ParameterError(f"sample_scale must be a positive number, got {sample_scale!r}")
        self.samples, self.sample_scale, self.sample_knots = int(samples), float(sample_scale), int(sample_knots)
        if (isinstance(derivative_refresh, bool) or not isinstance(derivative_refresh, (int, float))
                or not (0 < derivative_refresh <= 1)):
            raise ParameterError(f"derivative_refresh must be a fraction in (0, 1], got {derivative_refresh!r}")
        self.derivative_refresh = float(derivative_refresh)
        self._update_count = 0
        self._row_births: np.ndarray | None = None  # update at which each row of result.A was differentiated
        self.seed(0)

    def seed(self, seed: int) -> None:
        """Seed the sampled perturbations (``samples > 0``)."""
        self._rng = np.random.default_rng(seed)

    def close(self) -> None:
        """Release the dynamics' thread pool."""
        self.dynamics.close()

    def _sample(self, res: ILQGResult) -> ILQGResult:
        """The best of ``samples`` smooth perturbations of ``res``'s controls, improved by one
        iLQG iteration, when it beats ``res`` (class docstring); else ``res``."""
        best = best_perturbed_rollout(self.dynamics, self.solver.cost, res.X[0], res.U, self.solver.control_lower,
                                      self.solver.control_upper, self._rng,
                                      samples=self.samples, scale=self.sample_scale, knots=self.sample_knots,
                                      bar=float(res.cost))
        if best is None:
            return res
        best_U = best[1]
        new = self.solver.solve(res.X[0], best_U, max_iterations=1)
        return new if new.ok and new.cost < res.cost else res

    def set_lag_compensation(self, lag_compensation, *, prediction: str = "feedback", substeps: int = 1) -> None:
        """Switch lag compensation: None / 0 (off), seconds ``> 0``, or ``"auto"`` (see the class);
        ``prediction``: ``"feedback"`` or ``"feedforward"``; ``substeps``: prediction steps per
        planner step (e.g. ``h / plant step``, so the policy is evaluated as often as the plant does)."""
        lc = parse_lag_compensation(lag_compensation)
        if prediction not in ("feedback", "feedforward"):
            raise ParameterError(f"lag_prediction must be 'feedback' or 'feedforward', got {prediction!r}")
        if isinstance(substeps, bool) or int(substeps) != substeps or substeps < 1:
            raise ParameterError(f"lag_substeps must be an integer >= 1, got {substeps!r}")
        self.lag_compensation = lc
        self.lag_prediction = prediction
        self.lag_substeps = int(substeps)

    def predict(self, t: float, x, lag: float, policy=None, *, prediction: str | None = None):
        """State at ``t + lag`` predicted from ``x`` at ``t`` with the planner model under
        ``policy`` (default: the last policy handed out), whose control is evaluated at the
        start of every step of ``h / lag_substeps`` (``lag`` not a multiple: a shorter last step;
        :class:`~contactopt.mpc.lag.StatePredictor`).

        Returns:
          ``(nx,)`` state, or None if the simulation diverged (or there is no policy).
        """
        policy = self.policy if policy is None else policy
        if policy is None:
            return None
        ff = (self.lag_prediction if prediction is None else prediction) == "feedforward"
        step = self.h / self.lag_substeps
        if self._predictor is None or self._predictor.step != step:
            self._predictor = StatePredictor(self.model, step)

        def control(tk, xk):
            u = policy.feedforward(tk) if ff else policy.control(tk, xk)
            return u if np.all(np.isfinite(u)) else policy.feedforward(tk)

        return self._predictor.predict(t, x, lag, control)

    def _schedule_cost(self, t: float, x) -> None:
        """Moving targets of the cost at this plan's stage times ``t + k h``, ``k = 0 … T``
        (:meth:`TrajectoryCost.schedule <contactopt.costs.TrajectoryCost.schedule>`; a cost
        without one has fixed targets)."""
        schedule = getattr(self.solver.cost, "schedule", None)
        if schedule is not None:
            schedule(t, x, self.horizon + 1)

    def _policy(self, t: float, res: ILQGResult) -> TrajectoryPolicy:
        return TrajectoryPolicy(self.model, t, self.h, res.U, res.X, res.K,
                                self.solver.control_lower, self.solver.control_upper)

    def _derivative_hint(self, shift: float):
        """``(A, B, rows)`` for :meth:`ILQG.solve`'s ``derivative_hint`` (``derivative_refresh``
        in the class docstring) and the births of the reused rows, or ``(None, None)``."""
        prev = self.result
        if (self.derivative_refresh >= 1.0 or not self.solver.accepts_derivative_hint or prev is None
                or prev.A is None or self._row_births is None):
            return None, None
        T = self.horizon
        src = np.arange(T) + int(round(shift))
        covered = src < T
        A = np.zeros_like(prev.A)
        B = np.zeros_like(prev.B)
        A[covered] = prev.A[src[covered]]
        B[covered] = prev.B[src[covered]]
        births = np.full(T, -1, dtype=np.int64)
        births[covered] = self._row_births[src[covered]]
        budget = max(1, math.ceil(self.derivative_refresh * T))
        must = np.nonzero(~covered)[0]
        oldest_first = np.lexsort((np.arange(T), births))   # births ascending, then time
        optional = oldest_first[covered[oldest_first]]
        rows = np.concatenate([must, optional[:max(0, budget - must.size)]])
        return (A, B, np.sort(rows)), births

    def _record_births(self, res: ILQGResult, births) -> None:
        """Remember when each row of ``res.A`` was differentiated (``derivative_refresh``)."""
        self._update_count += 1
        if res.A is None:
            self._row_births = None
            return
        fresh = np.ones(res.A.shape[0], dtype=bool) if res.fresh_rows is None else res.fresh_rows
        now = np.full(res.A.shape[0], self._update_count, dtype=np.int64)
        self._row_births = now if births is None else np.where(fresh, now, births)

    def _finish(self, t, res: ILQGResult, wall: float, births=None) -> PlannerUpdate:
        timing = res.timing()
        breakdown = {k: timing[k] for k in BREAKDOWN_KEYS}
        if not res.ok or not (np.isfinite(res.U).all() and np.isfinite(res.K).all()):
            return PlannerUpdate(None, float(res.cost), res.iterations, wall, breakdown,
                                 f"iLQG {res.status.name}")
        self.result, self.t_plan = res, t
        self._record_births(res, births)
        self.policy = self._policy(t, res)
        return PlannerUpdate(self.policy, float(res.cost), res.iterations, wall, breakdown,
                             res.status.name)

    def reset(self, t: float, x) -> PlannerUpdate:
        """Plan from scratch from state ``x`` at time ``t`` (``initial_iterations`` iterations)."""
        t = check_finite("t", t)
        start = time.perf_counter()
        U = np.tile(self.nominal, (self.horizon, 1))
        self._schedule_cost(t, x)
        res = self.solver.solve(x, U, max_iterations=self.initial_iterations)
        return self._finish(t, res, time.perf_counter() - start)

    def update(self, t: float, x) -> PlannerUpdate:
        """One MPC update from the state ``x`` measured at time ``t`` (with lag compensation:
        from the state predicted at ``t + L_pred``, the returned policy's start time)."""
        t = check_finite("t", t)
        if self.result is None:
            return self.reset(t, x)
        start = time.perf_counter()
        if self.lag_compensation is not None:
            lag = self.prediction_lag()
            if lag > 0 and self.align_to_knots:
                lag = self.knot_aligned_lag(t, lag)
            if lag > 0:
                x_pred = self.predict(t, x, lag)
                if x_pred is not None:
                    self.last_prediction = (t, t + lag, x_pred)
                    t, x = t + lag, x_pred
        shift = max(0.0, (t - self.t_plan) / self.h)
        self._schedule_cost(t, x)
        try:
            hint, births = self._derivative_hint(shift)
            res = self.solver.solve_from_warm_start(x, self.result, shift=shift,
                                                    max_iterations=self.iterations_per_update,
                                                    derivative_hint=hint)
            if self.samples and res.ok:
                sampled = self._sample(res)
                if sampled is not res:
                    res, births = sampled, None
        except (ContactoptError, FloatingPointError) as exc:
            self.last_compute_time = time.perf_counter() - start
            return PlannerUpdate(None, compute_time=self.last_compute_time, message=str(exc))
        upd = self._finish(t, res, time.perf_counter() - start, births)
        self.last_compute_time = upd.compute_time
        return upd
