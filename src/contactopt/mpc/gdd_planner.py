"""Goal-directed dynamics as a zero-horizon MPC planner.

Each update solves goal-directed dynamics (:class:`~contactopt.solvers.gdd.GDDSolver`) at
the measured state: the control whose inverse dynamics minimize
``½ g(a)ᵀM⁻¹g(a) + ℓ(a)`` for the task's cost written over accelerations
(:mod:`contactopt.solvers.gdd.features`).  The policy is that control, held until the next
update (:class:`~contactopt.mpc.policy.ConstantPolicy`).  There is no horizon: the planner
is as far-sighted as its cost's PD features.
"""

from __future__ import annotations

import time

import mujoco
import numpy as np

from ..errors import ContactoptError, as_array, check_finite
from ..model import MAX_STATE_VALUE
from ..solvers.gdd import Cost, GDDSettings, GDDSolver
from .policy import ConstantPolicy
from .runner import BREAKDOWN_KEYS, PlannerUpdate

__all__ = ["GDDPlanner"]


class GDDPlanner:
    """Goal-directed dynamics at the measured state (implements the runner's ``Planner``).

    Args:
      model: the planner's model (the plant's ``nq``/``nv``/``nu``).
      cost: a :class:`~contactopt.solvers.gdd.Cost` over accelerations.
      settings: :class:`~contactopt.solvers.gdd.GDDSettings` (defaults if None).
      moving_residuals: residuals whose target follows a reference
        (:meth:`~contactopt.costs.Residual.with_reference`), scheduled at each update's time
        (the feature then pulls toward the target of now; the target's own velocity is not fed
        forward).

    The breakdown of an update has the shared keys (:data:`~contactopt.mpc.runner.BREAKDOWN_KEYS`,
    seconds, from :meth:`~contactopt.solvers.gdd.GDDResult.timing`): ``solve`` is the solver's time,
    ``derivatives`` and ``line_search`` are not measured separately (0); the message is the
    status name.
    """

    def __init__(self, model: mujoco.MjModel, cost: Cost, settings: GDDSettings | None = None, *,
                 moving_residuals=()):
        self.model = model
        self.cost = cost
        self.solver = GDDSolver(model, settings)
        self.data = mujoco.MjData(model)
        self.result = None
        #: residuals of the shared cost whose target follows a reference: scheduled at the
        #: measured time of every update (a zero-horizon plan has one stage)
        self.moving_residuals = list(moving_residuals)

    def _solve(self, t: float, x) -> PlannerUpdate:
        start = time.perf_counter()
        m, d = self.model, self.data
        x = as_array("x", x, (m.nq + m.nv + m.na,), max_abs=MAX_STATE_VALUE)
        for res in self.moving_residuals:
            res.schedule([t], t, x)
        d.qpos[:] = x[:m.nq]
        d.qvel[:] = x[m.nq:m.nq + m.nv]
        if m.na:
            d.act[:] = x[m.nq + m.nv:]
        d.time = float(t)
        # the control last applied (MuJoCo's meaning of data.ctrl): a non-quadratic Control term's
        # Gauss-Newton form is linearized there (contactopt.solvers.gdd.features)
        d.ctrl[:] = 0.0 if self.result is None else self.result.ctrl
        try:
            res = self.solver.solve(d, self.cost)
        except (ContactoptError, FloatingPointError, np.linalg.LinAlgError) as exc:
            return PlannerUpdate(None, compute_time=time.perf_counter() - start, message=f"GDD failed: {exc}")
        wall = time.perf_counter() - start
        ctrl = np.asarray(res.ctrl, dtype=float).copy()
        if not np.isfinite(ctrl).all():
            return PlannerUpdate(None, compute_time=wall, message="GDD control is not finite")
        self.result = res
        timing = res.timing()
        return PlannerUpdate(ConstantPolicy(ctrl, t0=t), float(res.cost), int(res.iterations), wall,
                             {k: timing[k] for k in BREAKDOWN_KEYS}, res.status.name)

    def reset(self, t: float, x) -> PlannerUpdate:
        """The goal-directed control at the initial state."""
        return self._solve(check_finite("t", t), x)

    def update(self, t: float, x) -> PlannerUpdate:
        """The goal-directed control at the state measured at ``t``."""
        return self._solve(check_finite("t", t), x)

    def close(self) -> None:
        """Nothing to release (for the registry's uniform interface)."""
