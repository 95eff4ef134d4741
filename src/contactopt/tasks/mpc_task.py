"""MPC tasks: a declarative description of a control problem, and its closed-loop runner.

An :class:`MPCTask` says what the plant and the planner's model are, how to draw an
initial state from a seed, the planner's cost, the success test, and the planner's
defaults.  :func:`run_ilqg_task` runs it with iLQG through :func:`contactopt.mpc.run_mpc`
and writes the report, video and plot of ``contactopt run TASK --planner ilqg``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import mujoco
import numpy as np

from ..errors import ParameterError

__all__ = ["MPCTask", "run_ilqg_task", "ilqg_runner", "build_ilqg_planner", "as_task", "register_ilqg_task"]


@dataclass(frozen=True)
class MPCTask:
    """A closed-loop control task.

    Attributes:
      name, model, description: registry entries (``model`` is a bundled model name).
      default_seconds: simulated duration of a run.
      plant_model: ``() -> MjModel`` the plant (MuJoCo at the plant time step).
      planner_model: ``() -> MjModel`` the planner's model (may be coarser / softer).
      cost: ``(planner_model) -> TrajectoryCost`` the planner's cost.
      initial_state: ``(plant_model, plant_data, rng)`` sets the initial state in
        ``plant_data`` from a ``numpy.random.Generator`` (seeded by ``--seed``).
      success: ``(model, data) -> bool`` the success test on the plant state.
      success_hold: seconds it must hold continuously.
      failure: ``(model, data) -> bool`` or None: a failure test on the plant state (e.g.
        "fell"), latched at its first true — a success must start before it.
      metric: ``(model, data) -> float`` a running cost on the plant state, recorded;
        metric_label: its name on the plot.
      ilqg: planner defaults: ``horizon`` (steps), ``settings`` (dict of
        :class:`~contactopt.solvers.ilqg.ILQGSettings` fields), ``iterations_per_update``,
        ``initial_iterations``, ``derivative_stride``, ``derivative_refresh``, ``nominal_control``,
        and the lag compensation of :class:`~contactopt.mpc.ILQGPlanner` (``lag_compensation``,
        ``lag_prediction``, ``lag_substeps``).
      lag: default sync-mode lag (seconds, or ``"measured"``).
      pushes: :class:`~contactopt.mpc.Push` es applied by default, or ``(rng) -> pushes``
        drawn per run from the seeded generator (after the initial state).
      target_slowdown: the slowdown at which the task must succeed (issue targets:
        1 = real time; the humanoid 2); ``bench ilqg`` measures its success rate there.
    """

    name: str
    model: str
    description: str
    plant_model: Callable
    planner_model: Callable
    cost: Callable
    initial_state: Callable
    success: Callable
    metric: Callable | None = None
    success_hold: float = 0.0
    failure: Callable | None = None
    metric_label: str = "task cost"
    default_seconds: float = 5.0
    ilqg: dict = field(default_factory=dict)
    lag: float | str = "measured"
    pushes: tuple | Callable = ()
    target_slowdown: float = 1.0


def as_task(task: MPCTask):
    """``task`` as a planner-independent :class:`~contactopt.task.Task`, so that every registered
    planner can run it (``contactopt run NAME --planner P``): the same plant, initial states,
    success and failure tests and metric; the running and terminal cost terms of its iLQG cost;
    the planner model's time step; its iLQG settings as ``planner_options["ilqg"]``."""
    from ..task import Task

    planner = task.planner_model()
    h = float(planner.opt.timestep)
    probe = task.cost(planner)

    def cost(model):
        return list(task.cost(model).running.terms)

    terminal = None
    if probe.terminal_scale == 1.0:
        def terminal(model):
            return list(task.cost(model).terminal.terms)

    ilqg = dict(task.ilqg)
    opts = {"horizon": int(ilqg.get("horizon", 50)) * h}
    for key, name in (("iterations_per_update", "iterations"), ("initial_iterations", "initial_iterations"),
                      ("derivative_stride", "derivative_stride"), ("lag_prediction", "lag_prediction"),
                      ("lag_substeps", "lag_substeps"),
                      ("derivative_refresh", "derivative_refresh")):
        if key in ilqg:
            opts[name] = ilqg[key]
    if ilqg.get("lag_compensation") is not None:
        opts["lag_compensation"] = ilqg["lag_compensation"]
    opts.update({k: v for k, v in ilqg.get("settings", {}).items()
                 if k in ("mu_init", "mu_min", "mu_max", "delta0", "line_search_steps")})
    opts["samples"] = 0  # the task's own settings are plain iLQG
    return Task(name=task.name, model=task.plant_model(), cost=cost, terminal_cost=terminal,
                initial_state=task.initial_state, success=task.success, success_hold=task.success_hold,
                failure=task.failure, duration=task.default_seconds, horizon=opts["horizon"],
                planner_timestep=h, planner_options={"ilqg": opts}, description=task.description,
                metric=task.metric, planner_model=lambda model: _planner_model_at(task, model.opt.timestep),
                base_dir=None)


def _planner_model_at(task: MPCTask, timestep: float) -> mujoco.MjModel:
    """The task's planner model at the planner time step ``timestep`` (its own unless ``--set timestep``)."""
    from ..model import with_timestep

    m = task.planner_model()
    return m if m.opt.timestep == timestep else with_timestep(m, timestep)


#: the keys of ``MPCTask.ilqg`` (and of ``run_ilqg_task`` planner overrides)
_ILQG_KEYS = frozenset({"horizon", "settings", "iterations_per_update", "initial_iterations",
                        "derivative_stride", "nominal_control", "lag_compensation", "lag_prediction",
                        "lag_substeps", "derivative_refresh"})


def build_ilqg_planner(task: MPCTask, planner_model=None, *, nthread: int | None = None, textbook: bool = False,
                       **overrides):
    """The :class:`~contactopt.mpc.ILQGPlanner` of ``task`` with its defaults (``overrides`` win).

    ``textbook=True`` switches to the textbook iLQG (``Q_uu + μI``, plain value update).
    """
    from ..dynamics import MujocoDynamics
    from ..mpc import ILQGPlanner
    from ..solvers.ilqg import ILQGSettings

    opts = {**task.ilqg, **overrides}
    unknown = set(opts) - _ILQG_KEYS
    if unknown:
        raise ParameterError(f"unknown iLQG planner option(s) {sorted(unknown)} for task {task.name!r}; "
                             f"known: {sorted(_ILQG_KEYS)}")
    m = task.planner_model() if planner_model is None else planner_model
    dyn = MujocoDynamics(m, nthread=nthread, derivative_stride=int(opts.get("derivative_stride", 1)))
    sdict = dict(opts.get("settings", {}))
    settings = ILQGSettings.textbook(**sdict) if textbook else ILQGSettings(**sdict)
    return ILQGPlanner(dyn, task.cost(m), int(opts.get("horizon", 50)), settings=settings,
                       iterations_per_update=int(opts.get("iterations_per_update", 1)),
                       initial_iterations=int(opts.get("initial_iterations", 30)),
                       nominal_control=opts.get("nominal_control"),
                       lag_compensation=opts.get("lag_compensation"),
                       lag_prediction=opts.get("lag_prediction", "feedback"),
                       lag_substeps=opts.get("lag_substeps", 1),
                       derivative_refresh=opts.get("derivative_refresh", 1.0))


def run_ilqg_task(task: MPCTask, *, seconds: float | None = None, seed: int = 0, mode: str = "sync",
                  lag=None, slowdown: float = 1.0, pushes=None, plant_model=None, textbook: bool = False,
                  stop_on_success: bool = False, latency: float = 0.0, **planner_overrides):
    """Run ``task`` closed loop with iLQG MPC.

    Args:
      seconds: simulated duration (default ``task.default_seconds``).
      seed: seeds the initial state.
      mode, lag, slowdown: see :class:`~contactopt.mpc.MPCSettings` (lag default: the task's).
      pushes: override of the task's pushes (default: the task's, drawn from the seed if a callable).
      plant_model: override of the plant (e.g. :func:`~contactopt.mpc.perturb_model` errors).
      textbook: use textbook iLQG instead of the seed's improvements.
      latency: extra seconds between each plan and its application that the planner is not told
        about (:attr:`~contactopt.mpc.MPCSettings.added_latency`).
      planner_overrides: keys of ``task.ilqg`` to override.

    Returns:
      ``(MPCResult, plant_model)``.
    """
    from ..mpc import MPCSettings, run_mpc

    seconds = task.default_seconds if seconds is None else float(seconds)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ParameterError(f"seconds must be positive, got {seconds}")
    plant = task.plant_model() if plant_model is None else plant_model
    data = mujoco.MjData(plant)
    rng = np.random.default_rng(seed)
    task.initial_state(plant, data, rng)
    if pushes is None:
        pushes = task.pushes(rng) if callable(task.pushes) else task.pushes
    planner = build_ilqg_planner(task, textbook=textbook, **planner_overrides)
    settings = MPCSettings(duration=seconds, mode=mode, lag=task.lag if lag is None else lag,
                           slowdown=slowdown, pushes=tuple(pushes),
                           success_hold=task.success_hold, stop_on_success=stop_on_success,
                           added_latency=latency)
    try:
        result = run_mpc(planner, plant, data, settings, success=task.success, metric=task.metric,
                         failure=task.failure)
    finally:
        planner.dynamics.close()
    return result, plant


def _report(task: MPCTask, planner: str, result) -> dict:
    return {"task": task.name, "planner": planner, **result.summary()}


def write_outputs(report: dict, task_name: str, plant, result, video=None, plot=None, *,
                  metric_label: str = "task cost") -> dict:
    """Write the optional MP4 ``video`` and PNG ``plot`` of a closed-loop run; note them in ``report``."""
    from ..mpc.outputs import plot_mpc, write_video

    if video is not None:
        report["video_frames"] = write_video(plant, result, video)
        report["video"] = str(video)
    if plot is not None:
        plot_mpc(task_name, result, plot, metric_label=metric_label)
        report["plot"] = str(plot)
    return report


def ilqg_runner(task: MPCTask):
    """The ``contactopt run`` runner of ``task`` with the iLQG planner."""

    def run(*, seconds=None, seed=0, video=None, plot=None, mode="sync", slowdown=None, lag=None, pushes=None,
            mass_scale=1.0, friction_scale=1.0, gain_scale=1.0, latency=0.0, **kw):
        from ..mpc import model_error, perturb_model

        if slowdown is None:  # the slowdown the task is specified at (1 = real time)
            slowdown = task.target_slowdown
        errors = model_error(mass_scale, friction_scale, gain_scale, latency)
        plant = None
        if mass_scale != 1.0 or friction_scale != 1.0 or gain_scale != 1.0:
            plant = perturb_model(task.plant_model(), mass_scale=mass_scale, friction_scale=friction_scale,
                                  gain_scale=gain_scale)
        result, plant = run_ilqg_task(task, seconds=seconds, seed=seed, mode=mode, slowdown=slowdown, lag=lag,
                                      pushes=pushes, plant_model=plant, latency=latency, **kw)
        report = _report(task, "ilqg", result)
        report["seed"] = seed
        if result.pushes:
            report["pushes"] = [{"time": p.time, "duration": p.duration, "body": p.body,
                                 "force": [float(f) for f in p.force]} for p in result.pushes]
        if errors:
            report["model_error"] = errors
        return write_outputs(report, task.name, plant, result, video, plot, metric_label=task.metric_label)

    run.task = task  # bench ilqg finds the task through its runner
    return run


def register_ilqg_task(task: MPCTask) -> None:
    """Register ``task`` in the task registry: its iLQG runner (:func:`ilqg_runner`) and its
    planner-independent form (:func:`as_task`), under ``task.name``."""
    from functools import partial

    from . import register_task

    register_task(task.name, "ilqg", ilqg_runner(task), model=task.model, description=task.description,
                  default_seconds=task.default_seconds, task_factory=partial(as_task, task))
