"""Planner sessions: one task's planner whose settings change while it runs.

:class:`PlannerSession` is the control interface shared by the browser GUI
(``contactopt gui``) and the policy server (``contactopt serve``): whoever owns the
plant calls :meth:`~PlannerSession.reset` once and :meth:`~PlannerSession.update` with
each measured state, while any other thread may read and change

* the planner's options and the cost weights — the ``--set`` keys of
  :func:`contactopt.mpc.registry.settings_help` (``horizon``, ``iterations``,
  ``weight.qpos``, ``terminal.weight.qvel``, …);
* the planner model's dynamics parameters, the ``model.*`` keys of
  :data:`DYNAMICS_KEYS` (mass scale, friction scale, contact time constant and damping
  ratio), which the planner's model gets and the plant does not — model error on purpose;
* the planner itself (:meth:`~PlannerSession.set_planner`).

A change is checked when it is made (a :class:`~contactopt.errors.ParameterError` naming
the key, nothing applied) and takes effect at the next update: the session rebuilds the
planner with :func:`~contactopt.mpc.registry.make` and replans from the measured state
with the planner's ``reset``.  The warm start is lost on a rebuild; the policy in use stays
valid until the new one is ready.

Example::

    session = PlannerSession(task, "ilqg")
    session.reset(t, x)                       # first plan
    session.set({"weight.qpos": 10.0, "horizon": 0.5, "model.mass_scale": 1.2})
    upd = session.update(t, x)                # rebuilt with the new settings
    u = session.policy.control(t, x)
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import mujoco
import numpy as np

from ..errors import ParameterError
from . import registry
from .runner import PlannerUpdate, perturb_model, planner_min_lag, seconds_or_zero

__all__ = ["DYNAMICS_KEYS", "PlannerSession", "Setting", "apply_dynamics"]


#: Dynamics parameters of the planner's model: key → (default, meaning).  None keeps the
#: model's own value.
DYNAMICS_KEYS: dict[str, tuple] = {
    "model.mass_scale": (1.0, "every body's mass and inertia × this"),
    "model.friction_scale": (1.0, "every geom's friction coefficients × this"),
    "model.contact_timeconst": (None, ("contact stiffness: solref time constant [s] of every geom "
                                       "(≥ 2 × the time step to take effect)")),
    "model.contact_dampratio": (None, "contact damping: solref damping ratio of every geom"),
}


def apply_dynamics(model: mujoco.MjModel, params: dict) -> mujoco.MjModel:
    """A copy of ``model`` with the dynamics parameters ``params`` (:data:`DYNAMICS_KEYS`).

    ``model.mass_scale`` and ``model.friction_scale`` multiply ``body_mass``/``body_inertia``
    and ``geom_friction``; ``model.contact_timeconst`` and ``model.contact_dampratio`` set
    ``geom_solref[:, 0]`` and ``geom_solref[:, 1]`` (and ``pair_solref`` of explicit contact
    pairs) when not None.  ``model`` is unchanged.
    """
    values = {k: params.get(k, d) for k, (d, _) in DYNAMICS_KEYS.items()}
    m = perturb_model(model, mass_scale=float(values["model.mass_scale"]),
                      friction_scale=float(values["model.friction_scale"]))
    for key, col in (("model.contact_timeconst", 0), ("model.contact_dampratio", 1)):
        if values[key] is not None:
            m.geom_solref[:, col] = float(values[key])
            if m.npair:
                m.pair_solref[:, col] = float(values[key])
    return m


def _check_dynamics(key: str, value):
    """``value`` of dynamics key ``key`` as a positive float (None allowed where the default is None)."""
    default = DYNAMICS_KEYS[key][0]
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "auto")):
        if default is None:
            return None
        raise ParameterError(f"--set {key}: expected a positive number, got {value!r}")
    try:
        if isinstance(value, bool):
            raise ValueError
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"--set {key}: expected a positive number, got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise ParameterError(f"--set {key}: must be positive and finite, got {value!r}")
    return v


@dataclass(frozen=True)
class Setting:
    """One key a session can change.

    Attributes:
      key: the ``--set`` key (``horizon``, ``weight.qpos``, ``model.mass_scale``, …).
      group: ``"planner"`` (an option of the planner), ``"cost"`` (a running-cost weight),
        ``"terminal"`` (a terminal-cost weight) or ``"model"`` (the planner model's dynamics).
      kind: ``"int"``, ``"float"``, ``"bool"``, ``"choice"``, ``"tuple"`` or ``"str"``.
      value: the current value (None: derived from the task and model).
      default: the value the session started with.
      doc: one line.
      choices: the valid values of a ``"choice"``.
    """

    key: str
    group: str
    kind: str
    value: object
    default: object
    doc: str
    choices: tuple = ()


def _kind(option: registry.Option) -> str:
    if option.choices:
        return "choice"
    return {int: "int", float: "float", bool: "bool", tuple: "tuple"}.get(option.kind, "str")


class PlannerSession:
    """A planner for ``task`` whose options, cost weights, model and name change while it runs.

    Args:
      task: a :class:`~contactopt.task.Task`.
      planner: a registered planner name (default: the first of ``task.planner_options``,
        else ``"ilqg"``).
      settings: initial ``--set`` keys (planner options, ``weight.*``, ``model.*``).
      seed: seeds planners that sample.

    Thread safety: :meth:`reset`, :meth:`update` and :meth:`close` are called by one thread
    (the plant's or the server's); every other method may be called from any thread.

    Raises:
      ParameterError: an unknown planner or key, a value of the wrong type, or a task the
        planner cannot run (before anything runs).
    """

    def __init__(self, task, planner: str | None = None, *, settings: dict | None = None, seed: int = 0):
        from ..task import Task

        if not isinstance(task, Task):
            raise ParameterError(f"PlannerSession: task must be a contactopt.Task, got {type(task).__name__}")
        self.task = task
        self.seed = int(seed)
        self.nominal = task.load_plant()
        self._lock = threading.Lock()  # guards the staged state below
        self._name = planner or task.default_planner
        self._options: dict = {}
        self._dynamics = {k: d for k, (d, _) in DYNAMICS_KEYS.items()}
        self._check_and_stage(self._name, dict(settings or {}))
        self._built = None  # (name, options, dynamics) of the planner in use
        self._dirty = True
        self._planner = None
        self._policy = None
        self._last: PlannerUpdate | None = None
        self._stats = {"updates": 0, "failures": 0, "rebuilds": 0, "last_update_wall": None,
                       "last_message": "", "last_cost": math.nan, "last_compute_ms": math.nan}
        self._intervals: list[float] = []
        self._closed = False
        self._terms = None  # (running, terminal) cost terms on the nominal model, built once

    def _cost_terms(self) -> tuple[list, list]:
        """The task's running and terminal cost terms on the nominal model, built on first use
        and kept: their keys and default weights do not change while the session lives, and
        building them (the task's cost function) is too slow for every telemetry sample."""
        if self._terms is None:
            self._terms = (list(self.task.cost_terms(self.nominal)),
                           list(self.task.cost_terms(self.nominal, terminal=True) or []))
        return self._terms

    # ------------------------------------------------------------------ settings

    @property
    def planner_name(self) -> str:
        """The planner the next update uses."""
        with self._lock:
            return self._name

    @staticmethod
    def planners() -> tuple[str, ...]:
        """Every registered planner name (one may still refuse a task when it is built)."""
        return registry.names()

    def _check_and_stage(self, name: str, changes: dict) -> None:
        """Check ``changes`` for planner ``name`` against the current settings; apply all or none."""
        changes = dict(changes)
        dynamics = dict(self._dynamics)
        for key in [k for k in changes if k.startswith("model.")]:
            if key not in DYNAMICS_KEYS:
                raise ParameterError(f"unknown setting {key!r} (model keys: {', '.join(DYNAMICS_KEYS)})")
            dynamics[key] = _check_dynamics(key, changes.pop(key))
        merged = {**{k: v for k, v in self._options.items() if v is not None}, **changes}
        if name != getattr(self, "_name", name):  # a new planner keeps only the weights
            merged = {k: v for k, v in merged.items() if "weight." in k or k in changes}
        options, weights = registry.parse_settings(name, self.task, merged, model=self.nominal)
        self._name = name
        self._options = {**options, **weights}
        self._dynamics = dynamics

    def set(self, changes: dict) -> None:
        """Stage ``changes`` (key → value, strings allowed) for the next update.

        Raises:
          ParameterError: an unknown key (the message lists the valid ones) or a bad value
            (names the key); nothing is changed then.
        """
        if not isinstance(changes, dict):
            raise ParameterError(f"settings must be a dict of key → value, got {type(changes).__name__}")
        with self._lock:
            self._check_and_stage(self._name, changes)
            self._dirty = True

    def set_planner(self, name: str, settings: dict | None = None) -> None:
        """Switch to planner ``name`` at the next update, keeping the cost weights and the
        model parameters; its options start at their defaults, then ``settings``."""
        registry.spec(name)  # an unknown name lists the valid ones
        with self._lock:
            old = (self._name, dict(self._options), dict(self._dynamics))
            try:
                self._check_and_stage(name, dict(settings or {}))
            except Exception:
                self._name, self._options, self._dynamics = old
                raise
            self._dirty = True

    def values(self) -> dict:
        """Current value of every key (planner options, weights, ``model.*``)."""
        terms, term = self._cost_terms()
        with self._lock:
            out = {}
            for key, t in zip(registry.cost_weight_keys(terms), terms):
                out[key] = float(self._options.get(key, t.weight))
            for key, t in zip(registry.cost_weight_keys(term), term):
                out["terminal." + key] = float(self._options.get("terminal." + key, t.weight))
            for o in registry.spec(self._name).options:
                out[o.name] = self._options.get(o.name, o.default)
            out.update(self._dynamics)
            return out

    def settings(self) -> list[Setting]:
        """Every key of the current planner with its group, kind, value, default and meaning."""
        values = self.values()
        with self._lock:
            sp = registry.spec(self._name)
        task_defaults = dict(self.task.planner_options.get(sp.name, {}))
        rows = []
        for o in sp.options:
            rows.append(Setting(o.name, "planner", _kind(o), values[o.name], task_defaults.get(o.name, o.default),
                                o.doc, tuple(o.choices)))
        terms, term = self._cost_terms()
        for key, t in zip(registry.cost_weight_keys(terms), terms):
            rows.append(Setting(key, "cost", "float", values[key], float(t.weight),
                                f"weight of the {type(t.norm).__name__} term on {t.name}"))
        for key, t in zip(registry.cost_weight_keys(term), term):
            k = "terminal." + key
            rows.append(Setting(k, "terminal", "float", values[k], float(t.weight),
                                f"terminal weight on {t.name}"))
        for key, (default, doc) in DYNAMICS_KEYS.items():
            rows.append(Setting(key, "model", "float", values[key], default, doc))
        return rows

    # ------------------------------------------------------------------ planning

    def _rebuild(self) -> None:
        """Build the staged planner; if it refuses, restore the settings of the one in use and re-raise."""
        with self._lock:
            name, options, dynamics = self._name, dict(self._options), dict(self._dynamics)
            self._dirty = False
        try:
            plant = apply_dynamics(self.nominal, dynamics) if any(
                dynamics[k] != d for k, (d, _) in DYNAMICS_KEYS.items()) else self.nominal
            planner = registry.make(name, self.task, plant=plant,
                                    **{k: v for k, v in options.items() if v is not None})
        except Exception:
            with self._lock:
                if self._built is not None:
                    self._name, self._options, self._dynamics = self._built
            raise
        self._built = (name, options, dynamics)
        if hasattr(planner, "seed"):
            planner.seed(self.seed)
        old, self._planner = self._planner, planner
        if old is not None:
            old.close()
            self._stats["rebuilds"] += 1

    def _record(self, upd: PlannerUpdate) -> PlannerUpdate:
        now = time.perf_counter()
        s = self._stats
        if s["last_update_wall"] is not None:
            self._intervals = (self._intervals + [now - s["last_update_wall"]])[-50:]
        s["updates"] += 1
        s["last_update_wall"] = now
        s["last_message"] = upd.message
        s["last_cost"] = float(upd.cost)
        s["last_compute_ms"] = 1e3 * float(upd.compute_time)
        if upd.policy is None:
            s["failures"] += 1
        else:
            self._policy = upd.policy
        self._last = upd
        return upd

    def reset(self, t: float, x) -> PlannerUpdate:
        """Build the planner (if needed) and make the first plan from state ``x`` at time ``t``."""
        if self._closed:
            raise ParameterError("the planner session is closed")
        if self._planner is None or self._dirty:
            self._rebuild()
        start = time.perf_counter()
        upd = self._planner.reset(float(t), np.asarray(x, dtype=float))
        upd.compute_time = upd.compute_time or time.perf_counter() - start
        return self._record(upd)

    def update(self, t: float, x) -> PlannerUpdate:
        """One receding-horizon update from state ``x`` (``(nx,)``) measured at time ``t`` [s];
        after a change of settings, the rebuilt planner's first plan instead."""
        if self._planner is None or self._dirty:
            return self.reset(t, x)
        upd = self._planner.update(float(t), np.asarray(x, dtype=float))
        return self._record(upd)

    @property
    def policy(self):
        """The newest :class:`~contactopt.mpc.policy.Policy` (None before the first plan)."""
        return self._policy

    @property
    def planner(self):
        """The planner object in use (None before :meth:`reset`)."""
        return self._planner

    @property
    def update_period(self) -> float:
        """Least simulated seconds between the states updates plan from: the ``update_period``
        option of the planner in use, or of the staged settings before the first plan."""
        if self._planner is not None:
            return float(getattr(self._planner, "update_period", 0.0) or 0.0)
        with self._lock:
            return float(self._options.get("update_period") or 0.0)

    @property
    def min_lag(self) -> float:
        """Least simulated seconds [s] between the state an update plans from and the moment its
        policy takes effect: the ``min_lag`` of the planner in use
        (:func:`~contactopt.mpc.runner.planner_min_lag`), or of the staged settings before the
        first plan."""
        if self._planner is not None:
            return planner_min_lag(self._planner)
        with self._lock:
            return seconds_or_zero(self._options.get("min_lag"))

    def planned_trajectory(self):
        """``(times (K,), qpos (K, nq))`` of the newest plan [s, model units], or None when the
        policy has no state trajectory (GDD's constant control, no plan yet)."""
        p = self._policy
        if p is None:
            return None
        X = getattr(p, "X", None)
        if X is not None:
            qpos = np.asarray(X)[:, : self.nominal.nq]
        elif getattr(p, "q", None) is not None:
            qpos = np.asarray(p.q)
        else:
            return None
        h = float(p.h)
        return p.t0 + h * np.arange(qpos.shape[0]), qpos.copy()

    def status(self) -> dict:
        """``planner``, ``updates``, ``failures``, ``rebuilds``, ``update_rate_hz`` (over the last
        50 updates), ``last_compute_ms``, ``last_cost``, ``last_message``, ``seconds_since_update``."""
        s = dict(self._stats)
        rate = (len(self._intervals) / sum(self._intervals)) if self._intervals and sum(self._intervals) > 0 \
            else math.nan
        last = s.pop("last_update_wall")
        return {"planner": self.planner_name, **s, "update_rate_hz": rate,
                "seconds_since_update": None if last is None else time.perf_counter() - last}

    def close(self) -> None:
        """Free the planner (its threads and compiled-loop buffers); the session cannot plan after."""
        self._closed = True
        if self._planner is not None:
            self._planner.close()
            self._planner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
