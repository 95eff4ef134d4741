"""The sampling escape shared by the iLQG and IDTO planners (their ``samples`` option).

A plan stuck in a local minimum (a torque-limited swing-up pushing one way) is escaped by
rolling out smooth random perturbations of its controls and keeping the cheapest rollout:
Gaussian values at ``knots`` knots over the horizon, linearly interpolated, with standard
deviation ``scale`` × each control's range (× 2 for an unlimited control), clipped to the
limits.  The planner then restarts its solver from the winner (iLQG + sampling, as MJPC's iLQS).
"""

from __future__ import annotations

import numpy as np

__all__ = ["best_perturbed_rollout"]


def best_perturbed_rollout(dynamics, cost, x0, U, lower, upper, rng: np.random.Generator, *, samples: int,
                           scale: float, knots: int, bar: float):
    """The cheapest of ``samples`` perturbed rollouts from ``x0``, if it costs less than ``bar``.

    Args:
      dynamics: with ``rollout(x0, U)``.
      cost: a trajectory cost with ``total(X, U)``.
      x0: ``(nx,)`` initial state; U: ``(T, nu)`` the plan's controls.
      lower, upper: ``(nu,)`` control limits (±∞ where none).
      rng: draws the perturbations (``samples × knots × nu`` normals, in that order).
      samples, scale, knots: as the module docstring.
      bar: the cost a rollout must beat.

    Returns:
      ``(cost, U (T, nu), X (T+1, nx))`` of the best rollout, or None when none beats ``bar``.
    """
    lo, hi = lower, upper
    span = np.where(np.isfinite(hi - lo), hi - lo, 2.0)
    T, nu = U.shape
    grid = np.linspace(0.0, knots - 1.0, T)
    best = None
    for _ in range(samples):
        values = rng.normal(size=(knots, nu)) * (scale * span)
        noise = np.stack([np.interp(grid, np.arange(knots), values[:, j]) for j in range(nu)], axis=1)
        Us = np.clip(U + noise, lo, hi)
        roll = dynamics.rollout(x0, Us)
        if roll.diverged:
            continue
        c = float(cost.total(roll.X, Us))
        if c < bar:
            bar, best = c, (c, Us, roll.X)
    return best
