"""The planner registry: one name, one set of options, for every planner that runs a Task.

``make(name, task, **options)`` builds a planner for the MPC runner (``reset``/``update``
returning :class:`~contactopt.mpc.runner.PlannerUpdate`) from a planner-independent
:class:`~contactopt.task.Task`.  Options have one name everywhere: they are the keys of
``contactopt run … --set KEY=VALUE``, and ``weight.TERM`` keys set cost weights (``TERM``
is a residual's name, ``qpos``, ``ctrl``, …; a second term of the same name is ``NAME_2``).

Registered planners (:func:`names`):

* ``ilqg`` — iLQG MPC (Tassa et al. 2012) on MuJoCo dynamics;
* ``ilqg-textbook`` — the same with textbook regularization and value update;
* ``idto`` — inverse-dynamics trajectory optimization, one trust-region iteration per update;
* ``gdd`` — goal-directed dynamics: a zero-horizon planner whose policy is the goal-directed
  control at the measured state.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np

from ..errors import ParameterError

__all__ = [
    "Option",
    "PlannerSpec",
    "apply_cost_weights",
    "cost_target_keys",
    "cost_weight_keys",
    "is_point_residual",
    "make",
    "names",
    "parse_settings",
    "register",
    "spec",
]


@dataclass(frozen=True)
class Option:
    """One planner option: its type, default (None: derived from the task or model) and meaning."""

    name: str
    kind: type
    default: Any
    doc: str
    choices: tuple = ()

    def parse(self, value):
        """``value`` (a string from the command line, or a Python value) as this option's type."""
        key = self.name
        if value is None and self.default is None:
            return None
        if self.kind is bool:
            if isinstance(value, str):
                low = value.strip().lower()
                if low in ("1", "true", "yes", "on"):
                    return True
                if low in ("0", "false", "no", "off"):
                    return False
                raise ParameterError(f"--set {key}: expected true or false, got {value!r}")
            if isinstance(value, bool):
                return value
            raise ParameterError(f"--set {key}: expected true or false, got {value!r}")
        if self.kind in (int, float):
            try:
                if isinstance(value, bool):
                    raise ValueError
                number = float(value)
                if self.kind is int:
                    if number != int(number):
                        raise ValueError
                    number = int(number)
            except (TypeError, ValueError, OverflowError):
                raise ParameterError(f"--set {key}: expected {'an integer' if self.kind is int else 'a number'}"
                                     f", got {value!r}") from None
            if not math.isfinite(number):
                raise ParameterError(f"--set {key}: must be finite, got {value!r}")
            return number
        if self.kind is tuple:
            items = value.split(",") if isinstance(value, str) else value
            try:
                out = tuple(float(v) for v in items)
            except (TypeError, ValueError):
                raise ParameterError(f"--set {key}: expected comma-separated numbers, got {value!r}") from None
            if not out or not all(math.isfinite(v) for v in out):
                raise ParameterError(f"--set {key}: expected finite numbers, got {value!r}")
            return out
        text = str(value)
        if self.choices and text not in self.choices:
            raise ParameterError(f"--set {key}: expected one of {', '.join(self.choices)}, got {value!r}")
        return text


@dataclass(frozen=True)
class PlannerSpec:
    """A registered planner: ``build(task, plant, options) -> planner``.

    ``accelerations``: whether the planner consumes cost terms written over accelerations
    (:class:`~contactopt.costs.AccelerationResidual`, goal-directed dynamics' own terms);
    :func:`parse_settings` (hence :func:`make`, ``serve``) refuses a task holding one for a planner
    that does not, naming the term.
    """

    name: str
    description: str
    options: tuple
    build: Callable
    accelerations: bool = False

    def option(self, key: str) -> Option:
        for opt in self.options:
            if opt.name == key:
                return opt
        raise KeyError(key)


_REGISTRY: dict[str, PlannerSpec] = {}


def register(spec_: PlannerSpec) -> PlannerSpec:
    """Add a planner to the registry (a name may be registered once)."""
    if spec_.name in _REGISTRY:
        raise ParameterError(f"planner {spec_.name!r} is already registered")
    _REGISTRY[spec_.name] = spec_
    return spec_


def _load_builtins() -> None:
    if not _REGISTRY:
        from . import builders  # noqa: F401  (registers the built-in planners)


def names() -> tuple[str, ...]:
    """Names of the registered planners."""
    _load_builtins()
    return tuple(_REGISTRY)


def spec(name: str) -> PlannerSpec:
    """The :class:`PlannerSpec` of ``name``; an unknown name is an error listing the valid ones."""
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ParameterError(f"unknown planner {name!r} (planners: {', '.join(_REGISTRY)})") from None


# --------------------------------------------------------------------------- cost weights


def cost_weight_keys(terms) -> list[str]:
    """``weight.NAME`` keys of ``terms`` in order (duplicate names get ``_2``, ``_3``, …)."""
    seen: dict[str, int] = {}
    keys = []
    for t in terms:
        n = seen[t.name] = seen.get(t.name, 0) + 1
        keys.append(f"weight.{t.name}" if n == 1 else f"weight.{t.name}_{n}")
    return keys


def is_point_residual(residual) -> bool:
    """Whether ``residual`` is a point's world position minus a ``(3,)`` target [m] (a goal that
    ``target.NAME`` moves: :class:`~contactopt.costs.SitePosition`,
    :class:`~contactopt.costs.BodyPosition`, :class:`~contactopt.costs.CenterOfMass`)."""
    from ..costs import BodyPosition, CenterOfMass, SitePosition

    return isinstance(residual, (SitePosition, BodyPosition, CenterOfMass))


def cost_target_keys(terms) -> list[str]:
    """``target.NAME`` keys of the point-residual terms of ``terms`` (names as :func:`cost_weight_keys`)."""
    return ["target." + k[len("weight."):] for k, t in zip(cost_weight_keys(terms), terms)
            if is_point_residual(t.residual)]


def apply_cost_weights(terms, weights: dict) -> list:
    """``terms`` with the overrides of ``weights`` applied: ``weight.NAME → w`` replaces a weight,
    ``target.NAME → (3,)`` the target [m, world] of a point residual (a copy of the residual;
    the task's own objects are untouched)."""
    import copy

    out = []
    for t, k in zip(terms, cost_weight_keys(terms)):
        if k in weights:
            t = dataclasses.replace(t, weight=weights[k])
        goal = weights.get("target." + k[len("weight."):])
        if goal is not None and is_point_residual(t.residual):
            r = copy.copy(t.residual)
            r.target = np.array(goal, dtype=float).reshape(3)
            t = dataclasses.replace(t, residual=r)
        out.append(t)
    return out


def _parse_target(key: str, value) -> tuple:
    """A ``target.NAME`` value (``"x,y,z"`` or 3 numbers) as a tuple of 3 finite floats [m]."""
    items = value.replace(" ", "").split(",") if isinstance(value, str) else value
    try:
        out = tuple(float(v) for v in items)
    except (TypeError, ValueError):
        out = ()
    if len(out) != 3 or not all(math.isfinite(v) for v in out):
        raise ParameterError(f"--set {key}: expected three finite numbers x,y,z [m], got {value!r}")
    return out


def parse_settings(name: str, task, settings: dict | None = None, *, model: mujoco.MjModel | None = None):
    """Split and check ``settings`` (``--set`` keys → values) for planner ``name`` and ``task``.

    Task defaults (``task.planner_options[name]``) come first, ``settings`` override them.
    Returns ``(options, weights)``: planner options (every key of the planner, defaults
    filled in) and the cost overrides: ``weight.NAME → w`` and ``target.NAME → (x, y, z)``
    (the goal of a point residual, :func:`cost_target_keys`).

    Raises:
      ParameterError: an unknown key (the message lists the valid ones), a value of the
        wrong type (names the key), or a cost term over accelerations for a planner that does
        not consume them (:attr:`PlannerSpec.accelerations`; names the term).
    """
    sp = spec(name)
    merged = {**dict(task.planner_options.get(name, {})), **dict(settings or {})}
    if model is None:
        model = task.load_plant()
    running = task.cost_terms(model)
    weight_keys = cost_weight_keys(running)
    term = task.cost_terms(model, terminal=True)
    if not sp.accelerations:
        from ..costs.stage import refuse_acceleration_terms

        try:
            refuse_acceleration_terms([*running, *(term or ())], f"'{name}'")
        except ParameterError as exc:
            raise ParameterError(f"planner '{name}' cannot run task {task.name}: {exc}") from None
    terminal_keys = ["terminal." + k for k in cost_weight_keys(term)] if term else []
    target_keys = cost_target_keys(running)
    options = {o.name: o.default for o in sp.options}
    weights = {}
    for key, value in merged.items():
        if key in target_keys:
            weights[key] = _parse_target(key, value)
            continue
        if key in weight_keys or key in terminal_keys:
            try:
                w = float(value)
            except (TypeError, ValueError):
                raise ParameterError(f"--set {key}: expected a number, got {value!r}") from None
            if not (math.isfinite(w) and w >= 0):
                raise ParameterError(f"--set {key}: a weight must be finite and >= 0, got {value!r}")
            weights[key] = w
            continue
        try:
            opt = sp.option(key)
        except KeyError:
            valid = [o.name for o in sp.options] + weight_keys + terminal_keys + target_keys
            raise ParameterError(f"unknown setting {key!r} for planner {name!r} on task {task.name!r} "
                                 f"(valid: {', '.join(valid)})") from None
        options[key] = opt.parse(value)
    for key in ("update_period", "min_lag"):
        if (options.get(key) or 0.0) < 0:
            raise ParameterError(f"--set {key}: must be seconds >= 0, got {options[key]!r}")
    return options, weights


def settings_help(name: str, task) -> list[tuple[str, str, str]]:
    """``(key, default, meaning)`` rows of every ``--set`` key of planner ``name`` on ``task``."""
    sp = spec(name)
    model = task.load_plant()
    defaults = dict(task.planner_options.get(name, {}))
    rows = [(o.name, str(defaults.get(o.name, "auto" if o.default is None else o.default)), o.doc)
            for o in sp.options]
    terms = task.cost_terms(model)
    for key, t in zip(cost_weight_keys(terms), terms):
        rows.append((key, f"{t.weight:g}", f"weight of the {type(t.norm).__name__} term on {t.name}"))
    term = task.cost_terms(model, terminal=True) or []
    for key, t in zip(cost_weight_keys(term), term):
        rows.append(("terminal." + key, f"{t.weight:g}", f"terminal weight on {t.name}"))
    for key, t in zip(cost_weight_keys(terms), terms):
        if is_point_residual(t.residual):
            rows.append(("target." + key[len("weight."):], ",".join(f"{v:g}" for v in t.residual.target),
                         f"goal of {t.name} [m, world x,y,z]"))
    return rows


def task_cost(task, model: mujoco.MjModel, timestep: float, weights: dict):
    """The task's :class:`~contactopt.costs.TrajectoryCost` on ``model`` with weight overrides."""
    from ..costs import StageCost, TrajectoryCost

    run = apply_cost_weights(task.cost_terms(model), weights)
    term = task.cost_terms(model, terminal=True)
    if term is not None:
        # terminal weights by their own keys; goals move the terminal term of the same name too
        tw = {k[len("terminal."):]: v for k, v in weights.items() if k.startswith("terminal.")}
        tw.update({k: v for k, v in weights.items() if k.startswith("target.")})
        term = StageCost(model, apply_cost_weights(term, tw))
    return TrajectoryCost(StageCost(model, run), term, timestep=timestep)


def make(name: str, task, *, plant: mujoco.MjModel | None = None, **settings):
    """Build planner ``name`` for ``task``.

    Args:
      name: a registered planner (:func:`names`).
      task: a :class:`~contactopt.task.Task`.
      plant: the plant model the planner will control (default ``task.load_plant()``); the
        planner plans on its own copy at the planner time step.
      settings: planner options and ``weight.NAME`` overrides (``--set`` keys; as Python
        keywords a dotted key is passed with ``**{"weight.qpos": 10}``).

    Returns:
      the planner (``reset``, ``update``, ``close``; ``model`` is the planner's model,
      ``options`` the options it was built with, ``update_period`` [s] its replan period,
      ``min_lag`` [s] its least policy lag).

    Raises:
      ParameterError: unknown planner, unknown option, a value of the wrong type, or a task
        the planner cannot run (the message says why, before any run starts).
    """
    from ..task import Task

    if not isinstance(task, Task):
        raise ParameterError(f"make: task must be a contactopt.Task, got {type(task).__name__}")
    sp = spec(name)
    if plant is None:
        plant = task.load_plant()
    options, weights = parse_settings(name, task, settings, model=plant)
    planner = sp.build(task, plant, options, weights)
    planner.options = dict(options, **weights)
    planner.planner_name = name
    # the runner reads it before every update (runner.planner_update_period)
    planner.update_period = float(options.get("update_period") or 0.0)
    planner.min_lag = float(options.get("min_lag") or 0.0)  # runner.planner_min_lag
    return planner
