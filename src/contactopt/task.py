"""The planner-independent task: what to control, what it costs, and what success is.

A :class:`Task` is written once and run with every planner (``contactopt.planners.make``):
a name, a model, a cost (a function of the model returning :class:`~contactopt.costs.CostTerm` s),
a success test and a duration are enough.  ``examples/pendulum/pendulum_task.py`` is a complete
task in 12 lines (a pendulum swing-up: ``Qpos`` toward π, ``Qvel`` and ``Control`` terms).

The cost is a *function of the model*: each planner builds it on the model it plans with
(its own time step, possibly softer contact), and the runner builds it once more on the
plant to record the running cost.  ``contactopt run FILE.py`` runs the ``TASK`` a file
defines (:func:`load_task_file`).
"""

from __future__ import annotations

import math
import os
import runpy
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np

from .errors import ContactoptError, ParameterError
from .model import load_model, planner_model_copy

__all__ = ["Task", "TaskFileError", "default_horizon", "default_planner_timestep", "load_task_file"]


class TaskFileError(ContactoptError):
    """A task file could not be used: missing, a syntax error, no ``TASK``, or it raised."""


def default_planner_timestep(model: mujoco.MjModel) -> float:
    """The planners' default time step [s]: the smallest whole multiple of the model's own step
    that is at least 10 ms (planners discretize more coarsely than simulators)."""
    h = float(model.opt.timestep)
    return h * max(1, math.ceil(0.01 / h - 1e-9))


def default_horizon(model: mujoco.MjModel) -> float:
    """The planners' default horizon [s]: one period ``2π √(ℓ/g)`` of a pendulum as long as the
    model's half extent ``ℓ = stat.extent / 2`` under its gravity, clipped to [0.5, 2.5] s; 1 s
    without gravity.  A time scale of the model's own motions, not of any task."""
    g = float(np.linalg.norm(model.opt.gravity))
    if g <= 0:
        return 1.0
    length = max(float(model.stat.extent) / 2.0, 1e-3)
    return float(np.clip(2.0 * math.pi * math.sqrt(length / g), 0.5, 2.5))


def _caller_dir() -> Path | None:
    """Folder of the Python file whose module-level code is constructing a Task (None if none)."""
    frame = sys._getframe(1)
    here = os.path.abspath(__file__)
    while frame is not None:
        fname = frame.f_globals.get("__file__")
        if fname and os.path.abspath(fname) != here and not frame.f_code.co_filename.startswith("<"):
            return Path(fname).resolve().parent
        frame = frame.f_back
    return None


@dataclass(frozen=True)
class Task:
    """A control task every planner can run.

    Attributes:
      name: short name (reports, file names).
      model: a bundled model name, an MJCF/URDF path (a relative path is resolved against
        the folder of the file that defines the task), or a ``mujoco.MjModel``.
      cost: ``cost(model) -> list[CostTerm]``: the running cost, a rate per second
        (:mod:`contactopt.costs`), built on whichever model a planner uses.
      terminal_cost: optional ``terminal_cost(model) -> list[CostTerm]`` (no control terms);
        default: the running cost's state terms times the planner's time step.
      initial_state: ``initial_state(model, data, rng)`` sets the plant's initial state in
        ``data`` from a seeded ``numpy.random.Generator``, or a keyframe name; default: the
        model's ``qpos0`` at rest.
      success: ``success(model, data) -> bool`` on the plant state (None: never succeeds).
      success_hold: seconds the success test must hold continuously (≥ 0).
      failure: optional ``failure(model, data) -> bool``, latched at its first true.
      duration: simulated seconds of a run (> 0).
      horizon: planning horizon [s] (default :func:`default_horizon` of the model).
      planner_timestep: planner time step [s] (default :func:`default_planner_timestep`).
      planner_options: per planner name, options that truly differ for this task
        (``{"idto": {"iterations": 2}}``); the keys are those of ``--set``.
      description: one line for listings.
      metric: optional ``metric(model, data) -> float`` recorded on the plant (default: the
        running cost at the plant state and control).
      planner_model: optional ``planner_model(model) -> MjModel`` applied to the planner's copy
        of the model after its time step is set (e.g. softer contact).
      base_dir: folder relative model paths are resolved against (filled in automatically).
    """

    name: str
    model: object
    cost: Callable
    terminal_cost: Callable | None = None
    initial_state: Callable | str | None = None
    success: Callable | None = None
    success_hold: float = 0.0
    failure: Callable | None = None
    duration: float = 5.0
    horizon: float | None = None
    planner_timestep: float | None = None
    planner_options: Mapping = field(default_factory=dict)
    description: str = ""
    metric: Callable | None = None
    planner_model: Callable | None = None
    base_dir: Path | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ParameterError(f"Task name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.model, (str, os.PathLike, mujoco.MjModel)):
            raise ParameterError(f"task {self.name}: model must be a bundled name, a path or an MjModel, "
                                 f"got {type(self.model).__name__}")
        for fname in ("cost", "terminal_cost", "success", "failure", "metric", "planner_model"):
            value = getattr(self, fname)
            if value is not None and not callable(value):
                raise ParameterError(f"task {self.name}: {fname} must be callable, got {type(value).__name__}")
        if self.cost is None:
            raise ParameterError(f"task {self.name}: cost is required")
        if self.initial_state is not None and not (callable(self.initial_state)
                                                   or isinstance(self.initial_state, str)):
            raise ParameterError(f"task {self.name}: initial_state must be callable or a keyframe name")
        for fname, positive in (("duration", True), ("success_hold", False), ("horizon", True),
                                ("planner_timestep", True)):
            value = getattr(self, fname)
            if value is None and fname in ("horizon", "planner_timestep"):
                continue
            try:
                v = float(value)
            except (TypeError, ValueError):
                raise ParameterError(f"task {self.name}: {fname} must be a number, got {value!r}") from None
            if not math.isfinite(v) or v < 0 or (positive and v == 0):
                raise ParameterError(f"task {self.name}: {fname} must be {'positive' if positive else '>= 0'} "
                                     f"and finite, got {value!r}")
            object.__setattr__(self, fname, v)
        if not isinstance(self.planner_options, Mapping) or not all(
                isinstance(v, Mapping) for v in self.planner_options.values()):
            raise ParameterError(f"task {self.name}: planner_options must map planner names to dicts of "
                                 "options")
        if self.base_dir is None:
            object.__setattr__(self, "base_dir", _caller_dir())

    # ------------------------------------------------------------------ models

    def model_source(self):
        """The model argument with a relative path resolved against :attr:`base_dir`."""
        m = self.model
        if isinstance(m, mujoco.MjModel):
            return m
        text = os.fspath(m)
        from .models import BUNDLED_MODELS

        if text in BUNDLED_MODELS:
            return text
        path = Path(text).expanduser()
        if not path.is_absolute() and self.base_dir is not None:
            path = self.base_dir / path
        return path

    def load_plant(self) -> mujoco.MjModel:
        """A fresh copy of the plant model (the model as written, its own time step)."""
        return load_model(self.model_source())

    def timestep(self, model: mujoco.MjModel) -> float:
        """The planner time step [s] (:attr:`planner_timestep` or the model's default)."""
        return self.planner_timestep if self.planner_timestep is not None else default_planner_timestep(model)

    def horizon_seconds(self, model: mujoco.MjModel) -> float:
        """The planning horizon [s] (:attr:`horizon` or the model's default)."""
        return self.horizon if self.horizon is not None else default_horizon(model)

    @property
    def default_planner(self) -> str:
        """The planner a session starts with when none is named: the first planner of
        :attr:`planner_options` (the one the task was written for), else ``"ilqg"``."""
        return next(iter(self.planner_options), "ilqg")

    def make_planner_model(self, plant: mujoco.MjModel, timestep: float) -> mujoco.MjModel:
        """The planner's model: a copy of ``plant`` at ``timestep`` [s] with an integrator MuJoCo's
        derivatives support (:func:`~contactopt.model.planner_model_copy`: RK4 becomes
        implicitfast, with a one-line :class:`~contactopt.errors.ModelNotice`), then
        :attr:`planner_model`.  ``plant`` is untouched."""
        m = planner_model_copy(plant, timestep)
        if self.planner_model is not None:
            m = self.planner_model(m)
            if not isinstance(m, mujoco.MjModel):
                raise ParameterError(f"task {self.name}: planner_model must return an MjModel")
        return m

    # ------------------------------------------------------------------ costs and states

    def cost_terms(self, model: mujoco.MjModel, *, terminal: bool = False) -> list:
        """The task's (terminal) cost terms built on ``model``, checked; None for a missing terminal."""
        from .costs import CostTerm

        fn = self.terminal_cost if terminal else self.cost
        if fn is None:
            return None
        what = "terminal_cost" if terminal else "cost"
        try:
            terms = fn(model)
        except ContactoptError as exc:
            raise ContactoptError(f"task {self.name}: {what}: {exc}") from exc
        except Exception as exc:
            raise ContactoptError(f"task {self.name}: {what} raised {type(exc).__name__}: {exc}") from exc
        if isinstance(terms, CostTerm):
            terms = [terms]
        try:
            terms = list(terms)
        except TypeError:
            raise ParameterError(f"task {self.name}: {what} must return a list of CostTerm, got "
                                 f"{type(terms).__name__}") from None
        for t in terms:
            if not isinstance(t, CostTerm):
                raise ParameterError(f"task {self.name}: {what} returned a {type(t).__name__}, not a CostTerm")
            built_for = t.residual.model
            if built_for is not None and built_for is not model:
                raise ParameterError(f"task {self.name}: cost term {t.name} was built for another model "
                                     "(build every term on the model the cost function is given)")
        return terms

    def trajectory_cost(self, model: mujoco.MjModel, timestep: float):
        """The :class:`~contactopt.costs.TrajectoryCost` of the task on ``model`` at ``timestep``."""
        from .costs import StageCost, TrajectoryCost

        running = StageCost(model, self.cost_terms(model))
        term = self.cost_terms(model, terminal=True)
        return TrajectoryCost(running, None if term is None else StageCost(model, term), timestep=timestep)

    def reset(self, model: mujoco.MjModel, data: mujoco.MjData, seed: int) -> None:
        """Put the plant in the task's initial state for ``seed`` (then ``mj_forward``)."""
        rng = np.random.default_rng(seed)
        mujoco.mj_resetData(model, data)
        init = self.initial_state
        if isinstance(init, str):
            kid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, init)
            if kid < 0:
                raise ParameterError(f"task {self.name}: the model has no keyframe {init!r}")
            mujoco.mj_resetDataKeyframe(model, data, kid)
        elif init is not None:
            try:
                init(model, data, rng)
            except ContactoptError:
                raise
            except Exception as exc:
                raise ContactoptError(f"task {self.name}: initial_state raised {type(exc).__name__}: {exc}") from exc
        if not (np.isfinite(data.qpos).all() and np.isfinite(data.qvel).all()):
            raise ContactoptError(f"task {self.name}: initial_state left a non-finite state")
        mujoco.mj_forward(model, data)


def load_task_file(path) -> Task:
    """The ``TASK`` a Python file defines (``contactopt run FILE.py``).

    The file runs as a script (``__name__`` is ``"__contactopt_task__"``); relative model
    paths of its task resolve against the file's folder.

    Raises:
      TaskFileError: the file is missing, has a syntax error, raises, defines no ``TASK`` or
        a ``TASK`` that is not a :class:`Task`; the message starts with the file name.
    """
    path = Path(path)
    if not path.is_file():
        raise TaskFileError(f"{path}: no such task file")
    if path.suffix.lower() in (".xml", ".urdf", ".mjb"):
        raise TaskFileError(f"{path}: a model, not a task file: run takes a bundled task name "
                            "or a Python file that defines TASK = contactopt.Task(...) (see the "
                            "README's 'Your own task'); `contactopt simulate` plays a model")
    try:
        namespace = runpy.run_path(str(path), run_name="__contactopt_task__")
    except SyntaxError as exc:
        raise TaskFileError(f"{path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except ContactoptError as exc:
        raise TaskFileError(f"{path}: {exc}") from exc
    except Exception as exc:
        raise TaskFileError(f"{path}: {type(exc).__name__}: {exc}") from exc
    if "TASK" not in namespace:
        raise TaskFileError(f"{path}: defines no TASK (assign a contactopt.Task to TASK)")
    task = namespace["TASK"]
    if not isinstance(task, Task):
        raise TaskFileError(f"{path}: TASK is a {type(task).__name__}, not a contactopt.Task")
    if task.base_dir is None:
        object.__setattr__(task, "base_dir", path.resolve().parent)
    return task
