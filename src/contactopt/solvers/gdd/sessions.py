"""Scripted goal-directed sessions: spatial goals dragged like a mouse (seed section VI).

In the seed's experiments a person picks a body segment and drags a spatial goal
for it with the mouse; goal-directed dynamics (GDD) then moves the model toward
the goal, and a damping term holds the pose in between.  A *session* scripts that
interaction:

* a :class:`Drag` moves the goal of one frame (a site or a body) from the frame's
  position at the start of the drag to ``position + offset`` along a minimum-jerk
  path (``drag`` seconds, like a mouse drag), keeps it there for ``hold`` seconds
  and then releases it;
* while a goal is held, an :class:`~contactopt.solvers.gdd.costs.EndEffectorAcceleration`
  term with a :class:`~contactopt.solvers.gdd.costs.SpringDamper` pulls the frame toward the
  dragged goal; between drags that term is switched off and the pose is held by the
  damping term ``(α/2)‖a + βv‖²_M`` and a posture term (a PD acceleration target
  toward the pose at the last release);
* a floating-base model keeps its centre of mass over its feet with a horizontal
  spring on the centre-of-mass acceleration (its height is only damped);
* every step is :func:`~contactopt.solvers.gdd.solver.gdd_step`: one MuJoCo evaluation,
  the GDD solve, the clamped controls applied and ``mj_step2``.

The session records the goal distance over time, falls (a monitored body below a
height), contacts of the support bodies, the per-step solver statistics and the
records a dataset needs (:mod:`contactopt.solvers.gdd.dataset`): ``(q, v, a, τ, ctrl)``
and the goal and posture reference of every step.  Long sessions (more than
``STEP_RECORD_LIMIT`` steps, or ``run_session(..., record="series")``) keep only the
series at the report's rate (20 Hz) plus running summaries that see every step (goal
distances, support contacts, solver statistics from a bounded reservoir), so a soak's
memory stays flat; pass ``record="steps"`` where every step's state is needed.

Presets: :func:`humanoid_reach_spec` (the humanoid stands with both feet on the
floor and reaches with its hands), :func:`hand_reach_spec` (fingertip goals on the
hand holding a ball) and :func:`auto_reach_spec` (any MJCF: goals on the 2–3 bodies
farthest along the kinematic tree).  :func:`run_session` runs a spec and can write an
MP4 (goal shown as a red sphere) and a PNG of the time series.

The pieces live in :mod:`~contactopt.solvers.gdd.reach_spec` (goal scripting, specs and
presets), :mod:`~contactopt.solvers.gdd.reach_session` (the running session) and
:mod:`~contactopt.solvers.gdd.session_runner` (running, results, report and plots); this module
re-exports them.
"""

from __future__ import annotations

from .reach_session import ReachSession
from .reach_spec import (
    Drag,
    ReachSpec,
    auto_reach_spec,
    choose_goal_frames,
    hand_reach_spec,
    humanoid_reach_spec,
)
from .session_runner import SessionResult, plot_session, run_session

__all__ = [
    "Drag",
    "ReachSpec",
    "ReachSession",
    "SessionResult",
    "humanoid_reach_spec",
    "hand_reach_spec",
    "auto_reach_spec",
    "choose_goal_frames",
    "run_session",
    "plot_session",
]
