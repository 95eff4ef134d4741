"""Planners for a :class:`~contactopt.task.Task`: ``make(name, task, **options)``.

The public face of :mod:`contactopt.mpc.registry` (which documents every planner and
option); ``names()`` lists the planners, ``settings_help(name, task)`` every ``--set`` key.

Example::

    import contactopt
    from contactopt.mpc import run_mpc  # or contactopt.mpc.task_runner.run_task
    task = contactopt.load_task_file("examples/pendulum/pendulum_task.py")
    planner = contactopt.planners.make("idto", task, horizon=2.0, **{"weight.qpos": 2.0})
"""

from .mpc.registry import PlannerSpec, make, names, settings_help, spec
from .mpc.task_runner import TaskRun, run_task, save_trajectory

__all__ = ["PlannerSpec", "TaskRun", "make", "names", "run_task", "save_trajectory", "settings_help", "spec"]
