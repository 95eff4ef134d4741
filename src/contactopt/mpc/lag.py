"""Lag compensation shared by the planners: plan from the state predicted at the policy lag.

A policy planned from the state ``x(t)`` measured at ``t`` reaches the plant only at
``t + L`` (the policy lag: the update's compute time, or the fixed lag of a synchronous run);
meanwhile the plant keeps applying the previous policy.  A planner with compensation first
predicts ``x(t + L_pred)`` by simulating its model from ``x(t)`` under that previous policy,
then plans from the predicted state and time.  Its policy is indexed by absolute time, so
the plant applies the right part of it whenever it takes effect.

``L_pred`` is a fixed number of seconds, or ``"auto"``: the shortest of the lags the runner
reported through ``observe_lag`` for the last :data:`AUTO_LAG_WINDOW` updates, else the
previous update's wall time.  The shortest, because the two ways of mispredicting are not
alike: a policy that takes effect *after* its start time is applied from the right knot (it
is indexed by absolute time), one that takes effect *before* it tracks a reference state the
plant has not reached yet.  In real time the lag varies from update to update (a 6 ms update
on a 5 ms plant step takes effect after 5, 10 or 15 ms, depending on where it finishes), and
predicting the last one overshoots about half the time (hopper-hop with a 5 ms planner step,
sync runs with that lag drawn per update: 11/16 seeds predicting the last lag, 16/16
predicting the shortest; docs/experiments/hopper-hop-ilqg.md).
With knot alignment the prediction runs on to the previous plan's first knot at or after
``t + L_pred``, so the new plan starts on the old plan's time grid and the warm start
shifts it by a whole number of knots.
"""

from __future__ import annotations

import collections
import math

import mujoco
import numpy as np

from ..errors import ParameterError

__all__ = ["AUTO_LAG_WINDOW", "parse_lag_compensation", "LagCompensation", "StatePredictor"]

#: updates whose observed lags ``lag_compensation="auto"`` takes the shortest of
AUTO_LAG_WINDOW = 10


def parse_lag_compensation(value):
    """``None`` (off: None, 0, ``"off"``), seconds ``> 0`` (float) or ``"auto"``.

    Raises:
      ParameterError: anything else (a negative, non-finite or boolean value, another string).
    """
    if value is None or value == "off" or (not isinstance(value, (str, bool)) and isinstance(value, (int, float))
                                           and value == 0):
        return None
    if isinstance(value, str):
        if value != "auto":
            raise ParameterError(f"lag_compensation must be seconds >= 0, 'auto' or 'off', got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ParameterError(f"lag_compensation must be seconds >= 0, 'auto' or 'off', got {value!r}")
    return float(value)


class LagCompensation:
    """Mixin of a planner with lag compensation (module docstring).

    The planner sets ``lag_compensation`` (:func:`parse_lag_compensation`'s result),
    ``observed_lag`` (None), ``last_compute_time`` (None), ``t_plan`` [s] (its last plan's
    start), ``h`` [s] (its knot or step spacing) and ``horizon_seconds`` (its plan's span).
    """

    def observe_lag(self, lag: float) -> None:
        """Called by the runner: the simulated seconds between the state an update was planned
        from and the moment its policy took effect (used by ``lag_compensation="auto"``)."""
        if math.isfinite(lag) and lag >= 0:
            self.observed_lag = float(lag)
            recent = getattr(self, "_recent_lags", None)
            if recent is None:
                recent = self._recent_lags = collections.deque(maxlen=AUTO_LAG_WINDOW)
            recent.append(float(lag))

    def prediction_lag(self) -> float:
        """``L_pred`` (s) the next update predicts over (0 when compensation is off), never
        beyond the previous plan (the previous policy is not defined further)."""
        lc = self.lag_compensation
        if lc is None:
            return 0.0
        if lc == "auto":
            recent = getattr(self, "_recent_lags", None)
            lc = min(recent) if recent else (self.last_compute_time or 0.0)
        return min(float(lc), self.horizon_seconds)

    def knot_aligned_lag(self, t: float, lag: float) -> float:
        """``lag`` (s) run on to the previous plan's first knot ``t_plan + n h`` at or after
        ``t + lag``; ``lag`` itself when that knot lies beyond the plan."""
        n = math.ceil((t + lag - self.t_plan) / self.h - 1e-9)
        aligned = self.t_plan + n * self.h - t
        return aligned if aligned <= self.horizon_seconds else lag


class StatePredictor:
    """Simulates a MuJoCo model forward under a control law: the lag compensation's prediction.

    Args:
      model: the model simulated (the planner's own).
      step: the prediction's step [s]: ``model`` itself when its ``opt.timestep`` is ``step``,
        else a copy with that time step; a lag that is not a multiple of ``step`` ends with one
        shorter step (another copy, cached per length).
    """

    def __init__(self, model: mujoco.MjModel, step: float):
        if not (math.isfinite(step) and step > 0):
            raise ParameterError(f"prediction step must be positive seconds, got {step!r}")
        self.model = model
        self.step = float(step)
        self.data = mujoco.MjData(model)
        self._models: dict = {}

    def _model(self, dt: float) -> mujoco.MjModel:
        if math.isclose(dt, self.model.opt.timestep, rel_tol=1e-12):
            return self.model
        key = round(dt, 12)
        m = self._models.get(key)
        if m is None:
            m = self.model.__copy__()
            m.opt.timestep = dt
            self._models[key] = m
        return m

    def predict(self, t: float, x, lag: float, control) -> np.ndarray | None:
        """State at ``t + lag`` from ``x = [qpos, qvel(, act)]`` at ``t``: ``mj_step`` on steps
        of ``step`` seconds, each with ``ctrl = control(t_k, x_k)`` evaluated at its start
        (``control`` returns ``(nu,)``; a non-finite control is an error of the law, so the
        prediction gives up).

        Returns:
          ``(nq + nv (+ na),)`` state (the length of ``x``), or None when the simulation or a
          control is not finite (the caller then plans from the measured state).
        """
        m0, d = self.model, self.data
        nq, nv, na = m0.nq, m0.nv, m0.na
        x = np.array(x, dtype=float)
        with_act = na and x.size >= nq + nv + na
        d.qpos[:] = x[:nq]
        d.qvel[:] = x[nq:nq + nv]
        if na:
            d.act[:] = x[nq + nv:nq + nv + na] if with_act else 0.0
        d.qacc_warmstart[:] = 0.0
        d.time = t
        n_full = int(math.floor(lag / self.step + 1e-9))
        rest = lag - n_full * self.step
        steps = [self._model(self.step)] * n_full
        if rest > 1e-9 * self.step:
            steps.append(self._model(rest))
        tk, xk = float(t), x
        for m in steps:
            u = control(tk, xk)
            if not np.all(np.isfinite(u)):
                return None
            d.ctrl[:] = u
            mujoco.mj_step(m, d)
            tk = float(d.time)  # accumulated as the plant's clock is (the policy's knots are sharp)
            xk = np.concatenate([d.qpos, d.qvel, d.act]) if with_act else np.concatenate([d.qpos, d.qvel])
            if not np.all(np.isfinite(xk)):
                return None
        return xk
