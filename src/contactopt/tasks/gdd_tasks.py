"""Tasks of the goal-directed dynamics planner: ``humanoid-reach`` and ``hand-reach``.

Both are scripted goal-directed sessions (:mod:`contactopt.solvers.gdd.sessions`): spatial
goals for chosen bodies are dragged as a person with a mouse would, goal-directed
dynamics moves the model toward them, and the damping and posture terms hold the
pose in between.

* ``humanoid-reach``: the humanoid stands on the floor with both feet in contact and
  reaches with its hands (goals 0.15–0.3 m away); it succeeds when every goal comes
  within 5 cm while it holds it and the humanoid never falls (pelvis below 0.6 m or
  torso below 0.75 m).
* ``hand-reach``: the hand holds the ball and moves its fingertips to goals 2–3 cm
  away; it succeeds when every goal comes within 1 cm and the ball stays in the hand.

``time_to_success`` is the time the last goal was first reached.  The report also has
the goal distances, falls, support contacts, GDD statistics and a goal-distance time
series (see :meth:`contactopt.solvers.gdd.sessions.SessionResult.report`).

This module only registers the runners; the heavy imports happen when one runs.
"""

from __future__ import annotations

from . import register_task

__all__ = ["hand_reach_task", "humanoid_reach_task", "run_hand_reach", "run_humanoid_reach"]


def _run(spec_factory, task: str, *, seconds=None, seed=0, video=None, plot=None, **options) -> dict:
    from ..solvers.gdd.sessions import run_session

    if options:
        from ..errors import ParameterError

        raise ParameterError(f"task {task!r} takes no options {sorted(options)}")
    spec = spec_factory(seconds=seconds, seed=int(seed))
    result = run_session(spec, video=video, plot=plot)
    report = result.report(task=task, planner="gdd")
    report["seed"] = int(seed)
    report["video"] = None if video is None else str(video)
    report["plot"] = None if plot is None else str(plot)
    return report


def run_humanoid_reach(*, seconds: float | None = None, seed: int = 0, video=None, plot=None,
                       **options) -> dict:
    """Run ``humanoid-reach`` with goal-directed dynamics.

    Args:
      seconds: simulated time in s (default 6; drags that fit are scheduled, at least one).  The
        four goals are anchored at the hands' rest positions and repeat, so a session of any
        length (e.g. 600 s for a soak) reaches the same goals over and over.
      seed: 0 is the standard schedule; other seeds perturb the goals by ±5 cm.
      video: optional MP4 path; plot: optional PNG path.

    Returns:
      the report dict (``task``, ``planner``, ``success``, ``time_to_success``, goal
      distances, ``falls``, ``gdd`` statistics, ``series``, ...).
    """
    from ..solvers.gdd.sessions import humanoid_reach_spec

    return _run(humanoid_reach_spec, "humanoid-reach", seconds=seconds, seed=seed, video=video,
                plot=plot, **options)


def run_hand_reach(*, seconds: float | None = None, seed: int = 0, video=None, plot=None,
                   **options) -> dict:
    """Run ``hand-reach`` with goal-directed dynamics.

    Args:
      seconds: simulated time in s (default 5).
      seed: 0 is the standard schedule; other seeds perturb the goals by ±5 mm.
      video: optional MP4 path; plot: optional PNG path.

    Returns:
      the report dict (see :func:`run_humanoid_reach`).
    """
    from ..solvers.gdd.sessions import hand_reach_spec

    return _run(hand_reach_spec, "hand-reach", seconds=seconds, seed=seed, video=video,
                plot=plot, **options)


def humanoid_reach_task():
    """``humanoid-reach`` as a planner-independent :class:`contactopt.Task`
    (:func:`contactopt.tasks.gdd_form.as_task` of the standard schedule)."""
    from ..solvers.gdd.sessions import humanoid_reach_spec
    from .gdd_form import as_task

    return as_task(humanoid_reach_spec(), description=_DESCRIPTIONS["humanoid-reach"])


def hand_reach_task():
    """``hand-reach`` as a planner-independent :class:`contactopt.Task`."""
    from ..solvers.gdd.sessions import hand_reach_spec
    from .gdd_form import as_task

    return as_task(hand_reach_spec(), description=_DESCRIPTIONS["hand-reach"])


_DESCRIPTIONS = {"humanoid-reach": "stand on the floor and reach with the hands to dragged goals",
                 "hand-reach": "move the fingertips to dragged goals while holding the ball"}

register_task("humanoid-reach", "gdd", run_humanoid_reach, model="humanoid",
              description=_DESCRIPTIONS["humanoid-reach"], default_seconds=6.0,
              task_factory=humanoid_reach_task)
register_task("hand-reach", "gdd", run_hand_reach, model="hand",
              description=_DESCRIPTIONS["hand-reach"], default_seconds=5.0, task_factory=hand_reach_task)
