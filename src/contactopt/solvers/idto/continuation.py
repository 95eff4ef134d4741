"""κ-continuation of :class:`~contactopt.solvers.idto.IDTOSolver` on the convex contact model.

The convex model's barrier weight κ (:class:`~contactopt.contact.ConvexContactModel`) sets how
much the contact is smoothed: the complementarity slack is ``f_n · s ≈ κ`` (impulse × velocity),
so a large κ exerts contact forces from a distance and gives a smooth, easy cost landscape, and
κ → 0 approaches hard contact (Todorov 2011, section I: "start with a large amount of
smoothing …, then gradually reduce smoothing while tracking the optimal solution").

:func:`solve_with_continuation` solves on the geometric schedule

    κ_0 = kappa_start,  κ_{k+1} = max(factor · κ_k, kappa_final),  until κ_K = kappa_final,

warm-starting stage ``k+1`` from stage ``k``'s configurations ``q`` (and its trust radius),
so the first cost of stage ``k+1`` is ``L_{κ_{k+1}}(q*_k)``.  A total budget of ``B``
iterations is split as evenly as possible over the ``K+1`` stages, the remainder going to the
last (final-κ) stage; a stage that converges early leaves its unused iterations unused.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from ...errors import ParameterError
from .solver import IDTOResult, IDTOSolver, IDTOStatus

__all__ = ["ContinuationResult", "ContinuationStage", "KappaSchedule", "solve_with_continuation"]


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ParameterError(f"KappaSchedule.{name} must be a number, got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ParameterError(f"KappaSchedule.{name} must be positive and finite, got {value!r}")
    return v


@dataclass(frozen=True)
class KappaSchedule:
    """Geometric κ schedule (validated on construction).

    Attributes:
      kappa_start: κ of the first stage (> 0, ≥ ``kappa_final``) [impulse × velocity, N·s·m/s].
      kappa_final: the target κ of the last stage (> 0).
      factor: shrink factor per stage, in ``(0, 1)`` (default 0.1: one decade per stage).
    """

    kappa_start: float
    kappa_final: float
    factor: float = 0.1

    def __post_init__(self):
        a = _positive("kappa_start", self.kappa_start)
        b = _positive("kappa_final", self.kappa_final)
        f = _positive("factor", self.factor)
        if not f < 1:
            raise ParameterError(f"KappaSchedule.factor must be in (0, 1), got {self.factor!r}")
        if a < b:
            raise ParameterError(f"KappaSchedule: kappa_start ({a:g}) must be >= kappa_final ({b:g})")

    def kappas(self) -> tuple[float, ...]:
        """The stages' κ: ``κ_0 = kappa_start``, ``κ_{k+1} = max(factor·κ_k, kappa_final)``, strictly
        decreasing, ending exactly at ``kappa_final`` (one stage when start == final)."""
        out = [float(self.kappa_start)]
        final = float(self.kappa_final)
        while out[-1] > final * (1 + 1e-12):
            out.append(max(out[-1] * self.factor, final))
        out[-1] = final
        return tuple(out)


@dataclass(frozen=True)
class ContinuationStage:
    """One stage of a continuation.

    Attributes:
      kappa: the stage's κ.
      iterations: solver iterations run (≤ its budget ``budget``).
      budget: iterations the stage was given.
      start_cost: ``L_κ`` at the stage's starting point (the previous stage's solution, or the guess).
      cost: ``L_κ`` at the stage's solution.
      wall_time: seconds of the stage's solve.
      status: the solve's :class:`~contactopt.solvers.idto.IDTOStatus`.
      result: the stage's :class:`~contactopt.solvers.idto.IDTOResult` (``result.q``: its solution).
    """

    kappa: float
    iterations: int
    budget: int
    start_cost: float
    cost: float
    wall_time: float
    status: IDTOStatus
    result: IDTOResult

    def summary(self) -> dict:
        """JSON-ready ``{kappa, iterations, budget, start_cost, cost, wall_time_s, status}``."""
        return {"kappa": self.kappa, "iterations": self.iterations, "budget": self.budget,
                "start_cost": self.start_cost, "cost": self.cost, "wall_time_s": self.wall_time,
                "status": self.status.value}


@dataclass(frozen=True)
class ContinuationResult:
    """Result of :func:`solve_with_continuation`.

    Attributes:
      result: the last (final-κ) stage's :class:`~contactopt.solvers.idto.IDTOResult`, with
        ``iterations`` the total over all stages, ``log`` every stage's iteration records in order
        and ``solve_time`` the whole continuation's seconds.
      stages: tuple of :class:`ContinuationStage`, in schedule order (κ decreasing).
    """

    result: IDTOResult
    stages: tuple

    @property
    def cost(self) -> float:
        """The final-κ cost ``L_{κ_final}`` of the solution."""
        return self.result.cost

    @property
    def iterations(self) -> int:
        """Total iterations over all stages."""
        return self.result.iterations


def solve_with_continuation(solver: IDTOSolver, q_guess, schedule: KappaSchedule, *,
                            max_iterations: int | None = None, keep_radius: bool = True) -> ContinuationResult:
    """Solve ``solver``'s convex-backend problem by κ-continuation (module docstring).

    Args:
      solver: an :class:`~contactopt.solvers.idto.IDTOSolver` whose problem has ``backend="convex"``;
        its problem's contact model is replaced by ``dataclasses.replace(model, kappa=κ_k)`` per
        stage and keeps ``kappa_final`` afterwards (all other contact parameters unchanged).
      q_guess: ``(T+1, nq)`` first stage's starting trajectory (``q_guess[0] = q_init``).
      schedule: the :class:`KappaSchedule`.
      max_iterations: total iteration budget ``B`` (default ``solver.options.max_iterations``),
        ``B ≥`` number of stages; stage ``k`` gets ``⌊B/(K+1)⌋`` and the last stage also the
        remainder.
      keep_radius: stage ``k+1`` starts with stage ``k``'s final trust radius (default; a fresh
        ``options.initial_radius`` after a collapsed radius); False: every stage starts fresh.

    Returns:
      :class:`ContinuationResult`.  Stage ``k+1`` starts from stage ``k``'s ``q``.

    Raises:
      ParameterError: a problem not on the convex backend, a bad schedule or budget.
    """
    if not isinstance(solver, IDTOSolver):
        raise ParameterError(f"solve_with_continuation: solver must be an IDTOSolver, got {type(solver).__name__}")
    if not isinstance(schedule, KappaSchedule):
        raise ParameterError(
            f"solve_with_continuation: schedule must be a KappaSchedule, got {type(schedule).__name__}")
    problem = solver.problem
    if problem.backend != "convex":
        raise ParameterError(f"κ-continuation needs the 'convex' backend; the problem's is {problem.backend!r}")
    kappas = schedule.kappas()
    budget = solver.options.max_iterations if max_iterations is None else max_iterations
    if isinstance(budget, bool) or int(budget) != budget or budget < len(kappas):
        raise ParameterError(f"max_iterations must be an integer >= the number of stages ({len(kappas)}), "
                             f"got {max_iterations!r}")
    budget = int(budget)
    per = budget // len(kappas)
    budgets = [per] * len(kappas)
    budgets[-1] += budget - per * len(kappas)
    base = problem.convex_contact
    q = problem.check_trajectory(q_guess)
    radius = None
    stages = []
    t_all = time.perf_counter()
    for kappa, n in zip(kappas, budgets):
        problem.set_convex_contact(dataclasses.replace(base, kappa=kappa))
        t0 = time.perf_counter()
        res = solver.solve(q, max_iterations=n, trust_radius=radius)
        wall = time.perf_counter() - t0
        start = res.log[0].cost if res.log else res.cost
        stages.append(ContinuationStage(kappa, res.iterations, n, float(start), float(res.cost), wall,
                                        res.status, res))
        q = res.q
        radius = (None if not keep_radius or res.status is IDTOStatus.TRUST_REGION_COLLAPSED
                  or res.trust_radius is None else res.trust_radius)
    last = stages[-1].result
    log = tuple(lg for st in stages for lg in st.result.log)
    final = dataclasses.replace(last, iterations=sum(st.iterations for st in stages), log=log,
                                solve_time=time.perf_counter() - t_all)
    return ContinuationResult(final, tuple(stages))
