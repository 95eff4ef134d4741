"""Closed-loop runs of a :class:`~contactopt.task.Task` with any registered planner.

:func:`run_task` loads the plant, puts it in the task's initial state for a seed, builds
the planner (:func:`contactopt.mpc.registry.make`), runs :func:`~contactopt.mpc.run_mpc`
and returns a :class:`TaskRun`: the :class:`~contactopt.mpc.MPCResult`, the plant model and
a JSON-ready report.  ``contactopt run TASK_OR_FILE`` is this function with flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from ..errors import ContactoptError, ParameterError
from .registry import make
from .runner import MPCResult, MPCSettings, model_error, perturb_model, plant_stepper, run_mpc

__all__ = ["TaskRun", "check_seed", "run_task", "save_trajectory"]

_MAX_SEED = 2 ** 32 - 1


def check_seed(seed) -> int:
    """``seed`` as an int in ``[0, 2³² − 1]`` (numpy's seed range) or a one-line error."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) <= _MAX_SEED:
        raise ParameterError(f"seed must be an integer in [0, {_MAX_SEED}], got {seed!r}")
    return int(seed)


@dataclass
class TaskRun:
    """A finished closed-loop run: ``result`` (:class:`MPCResult`), ``plant`` (the plant model,
    perturbed if asked), ``planner`` (name), ``options`` (the planner's options) and ``report``."""

    result: MPCResult
    plant: mujoco.MjModel
    planner: str
    options: dict
    report: dict


def guarded(task_name: str, what: str, fn):
    """``fn`` (a task's success, failure or metric function, user code) wrapped so that an
    exception it raises becomes a :class:`ContactoptError` naming the task and the function (one
    line on the CLI, never a traceback); None stays None."""
    if fn is None:
        return None

    def call(model, data):
        try:
            return fn(model, data)
        except ContactoptError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code: any exception is the user's error
            raise ContactoptError(f"task {task_name}: {what} raised {type(exc).__name__}: {exc}") from exc

    return call


def _metric(task, plant):
    """The recorded metric: the task's own, else its running cost at the plant's state and control
    (its terms over states and controls: a term written over accelerations has no value there)."""
    if task.metric is not None:
        return guarded(task.name, "metric", task.metric)
    from ..costs import StageCost

    stage = StageCost(plant, [t for t in task.cost_terms(plant) if not t.acceleration_level])
    moving = bool(stage.moving_residuals)

    def running_cost(model, data):
        x = np.concatenate([data.qpos, data.qvel, data.act])
        if moving:  # targets that follow a reference: the ones of now
            stage.schedule([data.time], data.time, x)
        return stage.value(x, data.ctrl.copy() if stage.uses_control else None)

    return running_cost


def run_task(task, planner: str = "ilqg", *, seed: int = 0, seconds: float | None = None, mode: str = "sync",
             lag=None, slowdown: float = 1.0, pushes=(), mass_scale: float = 1.0, friction_scale: float = 1.0,
             gain_scale: float = 1.0, latency: float = 0.0, settings: dict | None = None,
             stop_on_success: bool = False, plant_contact: str = "mujoco", plant_eta: float = 0.7) -> TaskRun:
    """Run ``task`` closed loop with ``planner``.

    Args:
      task: a :class:`~contactopt.task.Task`.
      planner: a registered planner name (:func:`contactopt.mpc.registry.names`).
      seed: seeds the initial state (integer in ``[0, 2³² − 1]``).
      seconds: simulated duration (default ``task.duration``).
      mode, lag, slowdown: :class:`~contactopt.mpc.MPCSettings` (lag default ``"measured"``).
      pushes: :class:`~contactopt.mpc.Push` es.
      mass_scale, friction_scale, gain_scale: model error of the plant (the planner keeps the
        nominal model; :func:`~contactopt.mpc.perturb_model`).
      latency: extra seconds between each plan and its application that the planner is not told
        about (:attr:`~contactopt.mpc.MPCSettings.added_latency`; sync mode).
      settings: planner options and ``weight.NAME`` overrides (``--set`` keys).
      stop_on_success: end the run once the success test has held.
      plant_contact: how the plant is stepped, ``"mujoco"`` (``mj_step``) or ``"smooth"`` (the iLQG
        paper's smooth contact model with η = ``plant_eta``; :func:`~contactopt.mpc.plant_stepper`).

    Returns:
      :class:`TaskRun`.
    """
    seed = check_seed(seed)
    seconds = task.duration if seconds is None else float(seconds)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ParameterError(f"seconds must be a positive finite number, got {seconds}")
    nominal = task.load_plant()
    plant = nominal
    errors = model_error(mass_scale, friction_scale, gain_scale, latency)
    if mass_scale != 1.0 or friction_scale != 1.0 or gain_scale != 1.0:
        plant = perturb_model(nominal, mass_scale=mass_scale, friction_scale=friction_scale, gain_scale=gain_scale)
    # a duration whose recording would not fit in memory is refused before anything is allocated
    steps = seconds / plant.opt.timestep
    if steps > 1e8:
        raise ParameterError(f"seconds={seconds:g} is {steps:.3g} plant steps; at most 1e8 are supported")
    step = plant_stepper(plant, plant_contact, eta=plant_eta)
    data = mujoco.MjData(plant)
    task.reset(plant, data, seed)
    p = make(planner, task, plant=nominal, **(settings or {}))
    if hasattr(p, "seed"):
        p.seed(seed)  # planners that sample draw from the run's seed
    mpc = MPCSettings(duration=seconds, mode=mode, lag="measured" if lag is None else lag, slowdown=slowdown,
                      pushes=tuple(pushes), success_hold=task.success_hold, stop_on_success=stop_on_success,
                      added_latency=latency)
    try:
        result = run_mpc(p, plant, data, mpc, success=guarded(task.name, "success", task.success),
                         metric=_metric(task, plant), failure=guarded(task.name, "failure", task.failure),
                         plant_step=step)
    finally:
        p.close()
    report = {"task": task.name, "planner": planner, "seed": seed, **result.summary()}
    if errors:
        report["model_error"] = errors
    if plant_contact != "mujoco":
        report["plant_contact"] = {"model": plant_contact, "eta": plant_eta}
    if result.pushes:
        report["pushes"] = [{"time": q.time, "duration": q.duration, "body": q.body,
                             "force": [float(f) for f in q.force]} for q in result.pushes]
    return TaskRun(result, plant, planner, dict(p.options), report)


def save_trajectory(run: TaskRun, path) -> None:
    """Write ``run`` as an ``.npz`` (atomically): ``time (N,)``, ``qpos (N, nq)``, ``qvel (N, nv)``,
    ``ctrl (N, nu)``, ``metric (N,)`` and per planner update ``update_time`` (the planned-from
    state's time, s), ``update_cost`` (planned cost), ``update_compute_time`` (wall s),
    ``update_lag`` (simulated s until applied; nan for a failed update) and ``update_ok``."""
    from ..render import atomic_output

    r = run.result
    ups = r.updates
    arrays = {
        "time": r.time, "qpos": r.qpos, "qvel": r.qvel, "ctrl": r.ctrl, "metric": r.metric,
        "update_time": np.array([u.t_state for u in ups]),
        "update_cost": np.array([u.cost for u in ups]),
        "update_compute_time": np.array([u.compute_time for u in ups]),
        "update_lag": np.array([np.nan if u.t_apply is None else u.t_apply - u.t_state for u in ups]),
        "update_ok": np.array([u.ok for u in ups], dtype=bool),
    }
    with atomic_output(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
