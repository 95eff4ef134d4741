"""iLQG as an MPC planner: warm-started receding-horizon updates with feedback policies."""

from __future__ import annotations

import time

import numpy as np

from ..errors import ContactoptError, ParameterError
from ..solvers.ilqg import ILQG, ILQGResult, ILQGSettings
from .policy import TrajectoryPolicy
from .runner import PlannerUpdate

__all__ = ["ILQGPlanner"]


class ILQGPlanner:
    """Receding-horizon iLQG (the seed paper's MPC loop).

    Each update shifts the previous plan to the measured time (``shift = (t − t_prev)/h``
    planner steps, :func:`~contactopt.solvers.ilqg.shift_plan`), rolls it out from the
    measured state under its own feedback gains, and runs ``iterations_per_update``
    iLQG iterations starting from the previous μ.  The resulting policy is
    ``u = U(t) + K(t)(x ⊖ X(t))`` (:class:`~contactopt.mpc.policy.TrajectoryPolicy`).
    A diverged or failed update returns no policy (the runner keeps the old one) and the
    next update warm-starts from the last good plan again.

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
    """

    def __init__(self, dynamics, cost, horizon: int, *, settings: ILQGSettings | None = None,
                 iterations_per_update: int = 1, initial_iterations: int = 30, nominal_control=None,
                 control_lower=None, control_upper=None):
        for name, v in (("horizon", horizon), ("iterations_per_update", iterations_per_update),
                        ("initial_iterations", initial_iterations)):
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {v!r}")
        self.solver = ILQG(dynamics, cost, settings, control_lower=control_lower, control_upper=control_upper)
        self.dynamics = dynamics
        self.model = dynamics.model
        self.h = float(dynamics.timestep)
        self.horizon = int(horizon)
        self.iterations_per_update = int(iterations_per_update)
        self.initial_iterations = int(initial_iterations)
        nu = dynamics.nu
        u0 = np.zeros(nu) if nominal_control is None else np.asarray(nominal_control, float).reshape(nu)
        self.nominal = np.clip(u0, self.solver.control_lower, self.solver.control_upper)
        self.result: ILQGResult | None = None
        self.t_plan = 0.0

    def _policy(self, t: float, res: ILQGResult) -> TrajectoryPolicy:
        return TrajectoryPolicy(self.model, t, self.h, res.U, res.X, res.K,
                                self.solver.control_lower, self.solver.control_upper)

    def _finish(self, t, res: ILQGResult, wall: float) -> PlannerUpdate:
        timing = res.timing()
        breakdown = {k: timing[k] for k in ("derivatives", "backward", "line_search")}
        if not res.ok or not (np.isfinite(res.U).all() and np.isfinite(res.K).all()):
            return PlannerUpdate(None, float(res.cost), len(res.iterations), wall, breakdown,
                                 f"iLQG {res.status.name}")
        self.result, self.t_plan = res, t
        return PlannerUpdate(self._policy(t, res), float(res.cost), len(res.iterations), wall, breakdown,
                             res.status.name)

    def reset(self, t: float, x) -> PlannerUpdate:
        """Plan from scratch from state ``x`` at time ``t`` (``initial_iterations`` iterations)."""
        start = time.perf_counter()
        U = np.tile(self.nominal, (self.horizon, 1))
        res = self.solver.solve(x, U, max_iterations=self.initial_iterations)
        return self._finish(t, res, time.perf_counter() - start)

    def update(self, t: float, x) -> PlannerUpdate:
        """One MPC update from the state ``x`` measured at time ``t``."""
        if self.result is None:
            return self.reset(t, x)
        start = time.perf_counter()
        shift = max(0.0, (t - self.t_plan) / self.h)
        try:
            res = self.solver.solve_from_warm_start(x, self.result, shift=shift,
                                                    max_iterations=self.iterations_per_update)
        except (ContactoptError, FloatingPointError) as exc:
            return PlannerUpdate(None, compute_time=time.perf_counter() - start, message=str(exc))
        return self._finish(t, res, time.perf_counter() - start)
