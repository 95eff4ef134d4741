"""The goals of :class:`~contactopt.mpc.live.LiveRun` (mixed into it as :class:`_GoalsMixin`):
the point-residual targets of the task's cost that :meth:`~contactopt.mpc.live.LiveRun.set_goal`
moves (``target.*`` keys), the planner's cost with those targets put in, and the plant-side
per-term costs of the cost plot."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ParameterError
from .live_helpers import GOAL_LIMIT


def _is_point_residual(residual) -> bool:
    """Whether ``residual`` is a point's world position minus a ``(3,)`` target (a goal;
    :func:`contactopt.mpc.registry.is_point_residual`)."""
    from .registry import is_point_residual

    return is_point_residual(residual)


class _GoalsMixin:
    """Goal methods of :class:`~contactopt.mpc.live.LiveRun`."""

    # ------------------------------------------------------------------ goals

    def _goal_cost(self, fn):
        """``fn`` (a task's cost function) with the targets of :meth:`set_goal` put into its
        point residuals (a copy of each residual moved; the task's own objects are untouched)."""
        from ..costs import CostTerm
        from .registry import apply_cost_weights

        def cost(model):
            terms = fn(model)
            goals = self._goal_targets
            if not goals or terms is None:
                return terms
            single = isinstance(terms, CostTerm)
            terms = [terms] if single else list(terms)
            if not all(isinstance(t, CostTerm) for t in terms):
                return terms  # Task.cost_terms reports what is wrong
            out = apply_cost_weights(terms, goals)  # the registry's target.* override, one place
            return out[0] if single else out

        cost.__name__ = getattr(fn, "__name__", "cost")
        cost.__doc__ = getattr(fn, "__doc__", None)
        return cost

    def _build_term_costs(self) -> None:
        """The plant-side per-term costs (weight 1) for the cost plot, at the current targets."""
        from ..costs import StageCost
        from .registry import cost_weight_keys

        terms = self.task.cost_terms(self._cost_model)
        # terms over accelerations have no value at a state: the plot shows the others
        keys = [(k, t) for k, t in zip(cost_weight_keys(terms), terms) if not t.acceleration_level]
        self._term_keys = [k for k, _ in keys]
        self._term_costs = [StageCost(self._cost_model, [dataclasses.replace(t, weight=1.0)]) for _, t in keys]
        self._term_uses_u = [t.residual.uses_control for _, t in keys]

    def _find_goals(self) -> dict:
        from .registry import cost_weight_keys

        out = {}
        lists = [self.base_task.cost_terms(self._cost_model),
                 self.base_task.cost_terms(self._cost_model, terminal=True) or []]
        for terms in lists:
            for key, t in zip(cost_weight_keys(terms), terms):
                r = t.residual
                gkey = "target." + key[len("weight."):]
                if gkey in out or not _is_point_residual(r) or getattr(r, "reference", None) is not None:
                    continue  # a target that follows a reference is not a goal to drag
                mask = np.zeros(3, dtype=bool)
                mask[np.asarray(r.axes, dtype=int)] = True
                out[gkey] = {"term": t.name, "residual": type(r).__name__, "axes": mask,
                             "default": np.asarray(r.target, dtype=float).copy()}
        return out

    def goals(self) -> dict:
        """The goals the task's cost has, generated from its terms: one per cost term whose residual
        is a point's world position minus a target (:class:`~contactopt.costs.SitePosition`,
        :class:`~contactopt.costs.BodyPosition`, :class:`~contactopt.costs.CenterOfMass`; parts of a
        :class:`~contactopt.costs.Combination` and targets that follow a reference are not goals).  Key ``target.<term name>`` (the
        weight key with ``target`` for ``weight``) → ``{"term", "residual", "axes" (3,) bool
        (the axes the residual uses), "default" (3,), "target" (3,) [m, world]}``."""
        current = self._goal_targets
        return {k: {**v, "axes": v["axes"].copy(), "default": v["default"].copy(),
                    "target": current.get(k, v["default"]).copy()} for k, v in self._goal_info.items()}

    def _check_goals(self, changes: dict) -> tuple[dict, list]:
        """Parse ``target.*`` values (3 numbers, or ``"x, y, z"``); clamp to :data:`GOAL_LIMIT`."""
        out, clamped = {}, []
        for key, value in changes.items():
            if key not in self._goal_info:
                valid = ", ".join(self._goal_info) or "none: the task's cost has no point-position term"
                raise ParameterError(f"unknown goal {key!r} (goals: {valid})")
            if isinstance(value, str):
                parts = [p for p in value.replace(",", " ").split() if p]
                try:
                    value = [float(p) for p in parts]
                except ValueError:
                    raise ParameterError(f"{key}: expected 3 numbers x, y, z [m], got {value!r}") from None
            try:
                g = np.asarray(value, dtype=float).reshape(-1)
            except (TypeError, ValueError):
                raise ParameterError(f"{key}: expected 3 numbers x, y, z [m], got {value!r}") from None
            if g.shape != (3,) or not np.isfinite(g).all():
                raise ParameterError(f"{key}: expected 3 finite numbers x, y, z [m], got {value!r}")
            c = np.clip(g, -GOAL_LIMIT, GOAL_LIMIT)
            if (c != g).any():
                clamped.append(key)
            out[key] = c
        return out, clamped

    def _apply_goals(self, goals: dict, *, log: bool = True) -> None:
        """Install checked goals (lock held): the planner rebuilds its cost at its next update."""
        if not goals:
            return
        self._goal_targets = {**self._goal_targets, **{k: v.copy() for k, v in goals.items()}}
        self.session.set({})  # nothing else changes; the session rebuilds the planner's cost
        self._build_term_costs()
        if log:
            for k, v in goals.items():
                self._log(f"goal {k} = {np.round(v, 4).tolist()}")

    def set_goal(self, key: str, target) -> np.ndarray:
        """Move goal ``key`` (see :meth:`goals`) to ``target`` (3,) [m, world axes; only the
        residual's axes matter].  The planner's cost has the new target from its next update
        (the session rebuilds the planner, as for any change); the plotted cost at once.
        Returns the target applied (clamped to ±:data:`GOAL_LIMIT`).

        Raises:
          ParameterError: an unknown goal (the message lists the task's) or not 3 finite numbers.
        """
        goals, _ = self._check_goals({key: target})
        with self._wake:
            self._apply_goals(goals)
            self._sample()
            self._version += 1
            self._wake.notify_all()
        return goals[key].copy()
