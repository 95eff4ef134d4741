"""The MPC runner: a planner re-optimizing in a receding horizon against a MuJoCo plant.

One runner serves every planner (iLQG, IDTO).  A *planner* turns a measured state into a
:class:`~contactopt.mpc.policy.Policy`; the *plant* is a MuJoCo simulation at its own
time step (it may be a different model: stiffer contact, other masses) that applies the
newest policy at every plant step.

Modes
-----
``"sync"`` (deterministic, for tests and seeded experiments)
    Plant and planner alternate in one thread.  An update planned from the state at time
    ``t`` takes effect at ``t + lag`` of simulated time; the next update starts when the
    previous one is done (``t + lag``) or at the next instant of the ``update_period`` grid,
    whichever is later (the first plant step at or after it: a period that is not a multiple
    of the plant step still gives ``1 / update_period`` updates per second on average).
    ``lag`` is either fixed (seconds; deterministic) or ``"measured"``: the update's wall
    time divided by ``slowdown`` — what a computer ``slowdown``× slower than real time
    would see, without the threads' noise.
``"async"`` (real time)
    Planner and plant run in separate threads.  The plant is paced so that one simulated
    second takes ``slowdown`` wall seconds (it runs slower if it cannot keep up; the
    reached real-time factor is reported), and always applies the newest policy.  The
    policy lag is measured: simulated time between the state a policy was planned from
    and the moment the plant starts applying it.  Without an update period the planner starts
    its next update as soon as the previous one is done and the plant has moved, or after
    :data:`REPLAN_WAIT` from the same state (a warm-started re-solve: more iterations on it).
    With one, it plans from the first state at or after the next instant of the period's grid
    (as in sync mode) and waits, without re-solving, in between.

The update period is the larger of :attr:`MPCSettings.update_period` and the planner's own
``update_period`` attribute (:func:`planner_update_period`; the ``update_period`` option of
every registered planner), read before each update, so a planner whose setting changes
during the run is followed.  It is the MPC rate a planner was tuned for: IDTO with one
iteration per update converges each plan further the more often it updates, and some tasks
only work near their paper's rate (``docs/experiments/remote-quadruped.md``).

A planner's ``min_lag`` attribute (:func:`planner_min_lag`; the ``min_lag`` option of every
registered planner) holds each new policy back until that long after the state it was
planned from, in both modes (sync: the lag is ``max(lag, min_lag)``; async: the plant keeps the
previous policy until then).  At every plant step the newest plan that is due is in force.
The IDTO scenarios set their fixed sync-mode lag (``IDTOTask.policy_min_lag``): their recipes
work when the plant never runs a plan's first knot interval
(``docs/experiments/idto-min-lag.md``).

A failed update (diverged solve, non-finite plan) never reaches the plant: the last good
policy stays in force.  A non-finite feedback control falls back to the policy's
feedforward, and a non-finite state stops the run with :class:`SimulationError`.

Perturbations are :class:`Push` es through ``data.xfrc_applied``; model errors are applied
to the plant with :func:`perturb_model`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable, Protocol

import mujoco
import numpy as np

from ..errors import ContactoptError, NonFiniteError, ParameterError, as_array
from ..simulate import SimulationError
from .policy import Policy

__all__ = ["Planner", "PlannerUpdate", "Push", "MPCSettings", "MPCResult", "UpdateRecord", "UpdateLog",
           "planner_update_period", "planner_min_lag", "next_update_start", "pop_newest_due", "seconds_or_zero",
           "run_mpc", "perturb_model", "find_min_slowdown", "BREAKDOWN_KEYS", "PLANT_CONTACTS",
           "plant_stepper"]

#: the phases of :attr:`PlannerUpdate.breakdown`, the keys shared by the solvers' ``result.timing()``:
#: linearization, the step's linear algebra (iLQG backward pass, IDTO Hessian + factorization +
#: dogleg, GDD kernel) and the line search (iLQG rollouts, IDTO trial points; 0 for GDD)
BREAKDOWN_KEYS = ("derivatives", "solve", "line_search")
#: rows per chunk of the plant recording (:class:`_Plant`): 4,096 samples, 41 s at the default 10 ms
RECORD_CHUNK = 4096


# --------------------------------------------------------------------------- interfaces


@dataclass
class PlannerUpdate:
    """What one planner update returns.

    Attributes:
      policy: the new policy, or None when the update failed (the old one is kept).
      cost: planned total cost after the update (nan if unknown).
      iterations: optimizer iterations done.
      compute_time: wall seconds the update took.
      breakdown: wall seconds per phase (:data:`BREAKDOWN_KEYS`: ``derivatives``, ``solve``,
        ``line_search``; the planners report all three).
      message: why it failed, or the solver's status name (``status.name``).
    """

    policy: Policy | None
    cost: float = math.nan
    iterations: int = 0
    compute_time: float = 0.0
    breakdown: dict = field(default_factory=dict)
    message: str = ""


class Planner(Protocol):
    """What :func:`run_mpc` needs of a planner.

    ``reset(t, x)`` makes the initial plan (may iterate to convergence; its time is not
    counted against the plant); ``update(t, x)`` makes one receding-horizon update from
    the state measured at time ``t``.  Both return a :class:`PlannerUpdate`.
    Optionally, ``observe_lag(seconds)`` is called with the policy lag of every applied
    update (sync: the modeled lag; async: the measured one), an ``update_period``
    attribute (simulated seconds ≥ 0) sets the least time between the states it plans from,
    and a ``min_lag`` attribute (simulated seconds ≥ 0) the least time between the state an
    update planned from and the moment its policy takes effect (:func:`planner_min_lag`).
    """

    def reset(self, t: float, x: np.ndarray) -> PlannerUpdate: ...

    def update(self, t: float, x: np.ndarray) -> PlannerUpdate: ...


@dataclass(frozen=True)
class Push:
    """A push on a body: wrench ``[force (N), torque (N·m)]`` in world coordinates at the
    body's centre of mass, during ``[time, time + duration)`` (s)."""

    time: float
    duration: float
    body: str
    force: tuple = (0.0, 0.0, 0.0)
    torque: tuple = (0.0, 0.0, 0.0)


@dataclass
class MPCSettings:
    """Parameters of :func:`run_mpc`.

    Attributes:
      duration: simulated seconds (> 0).
      mode: ``"sync"`` or ``"async"`` (see the module docstring).
      lag: sync mode: seconds of simulated time until an update takes effect, or
        ``"measured"`` (wall time / ``slowdown``).
      update_period: simulated time between update starts (s; updates start on this grid
        unless the planner is still busy; 0 = as soon as the previous one is done); both
        modes.  A planner's own ``update_period`` attribute, when larger, wins.
      slowdown: wall seconds per simulated second (async pacing; ``"measured"`` lag), ≥ 0
        (0 in async mode = run the plant as fast as it goes).
      pushes: :class:`Push` es applied to the plant.
      record_period: simulated seconds between recorded samples (≥ plant step).
      success_hold: seconds the task's success test must hold continuously.
      stop_on_success: end the run once the task has succeeded (after ``success_hold``).
      stop_on_failure: end the run at the first failure (the ``failure`` test of :func:`run_mpc`).
      max_failed_updates: consecutive failed updates after which the run stops with an error.
      added_latency: sync mode: extra simulated seconds (≥ 0) between a plan and its application
        that the planner is not told about (its lag compensation sees only ``lag``): a model
        error of the loop, e.g. sensing and actuation delays, for robustness runs.
    """

    duration: float
    mode: str = "sync"
    lag: float | str = "measured"
    update_period: float = 0.0
    slowdown: float = 1.0
    pushes: tuple = ()
    record_period: float = 0.01
    success_hold: float = 0.0
    stop_on_success: bool = False
    stop_on_failure: bool = False
    max_failed_updates: int = 1000
    added_latency: float = 0.0

    def __post_init__(self):
        if not (isinstance(self.duration, (int, float)) and math.isfinite(self.duration)
                and self.duration > 0):
            raise ParameterError(f"MPC duration must be a positive number of seconds, got {self.duration!r}")
        if self.mode not in ("sync", "async"):
            raise ParameterError(f"MPC mode must be 'sync' or 'async', got {self.mode!r}")
        if isinstance(self.lag, str):
            if self.lag != "measured":
                raise ParameterError(f"lag must be seconds >= 0 or 'measured', got {self.lag!r}")
        elif not (math.isfinite(self.lag) and self.lag >= 0):
            raise ParameterError(f"lag must be seconds >= 0 or 'measured', got {self.lag!r}")
        for name in ("update_period", "slowdown", "success_hold", "added_latency"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ParameterError(f"{name} must be a finite number >= 0, got {v!r}")
        if not (math.isfinite(self.record_period) and self.record_period > 0):
            raise ParameterError(f"record_period must be positive, got {self.record_period!r}")
        if self.added_latency > 0 and self.mode != "sync":
            raise ParameterError("added_latency is a sync-mode setting (async runs have their real latency)")
        if self.mode == "sync" and self.lag == "measured" and self.slowdown <= 0:
            raise ParameterError("lag='measured' needs slowdown > 0")
        for p in self.pushes:
            if not isinstance(p, Push):
                raise ParameterError(f"pushes must be Push objects, got {type(p).__name__}")


@dataclass(frozen=True)
class UpdateRecord:
    """One planner update as the plant saw it: planned from the state at ``t_state``,
    applied from ``t_apply`` (None if it failed), wall ``compute_time`` (s)."""

    t_state: float
    t_apply: float | None
    compute_time: float
    cost: float
    iterations: int
    ok: bool
    breakdown: dict
    message: str = ""


class UpdateLog(Sequence):
    """The :class:`UpdateRecord` s of a run, stored column-wise (a read-only sequence of records).

    A run appends one record per planner update (up to ~100 per simulated second): kept as
    Python objects each costs ~500 bytes (the record, its floats and its breakdown dict), which
    over a 10-minute soak is tens of MB of steady RSS growth (issue 26).  Here an update costs
    ~80 bytes: its numbers in float64 columns grown by doubling, its message as a reference (the
    planners' status names are shared strings).  Indexing builds an equal :class:`UpdateRecord`;
    a record whose fields are not plain floats / ints / bools, or whose breakdown has keys other
    than :data:`BREAKDOWN_KEYS` or values that are not finite floats, is kept as given.
    """

    _COLS = ("t_state", "t_apply", "compute_time", "cost", "iterations", "ok") + BREAKDOWN_KEYS

    def __init__(self, records=()):
        self._a = np.empty((64, len(self._COLS)))
        self._n = 0
        self._messages: list[str] = []
        self._odd: dict[int, UpdateRecord] = {}  # row → a record not stored in the columns
        self._lock = threading.Lock()  # async mode appends from the planner and the plant threads
        for r in records:
            self.append(r)

    @staticmethod
    def _plain(r: UpdateRecord) -> bool:
        return (all(isinstance(v, float) for v in (r.t_state, r.compute_time, r.cost))
                and (r.t_apply is None or (isinstance(r.t_apply, float) and not math.isnan(r.t_apply)))
                and type(r.iterations) is int and abs(r.iterations) < 2 ** 53 and type(r.ok) is bool
                and isinstance(r.breakdown, dict)
                and all(k in BREAKDOWN_KEYS and isinstance(v, float) and math.isfinite(v)
                        for k, v in r.breakdown.items()))

    def append(self, r: UpdateRecord) -> None:
        """Store ``r`` (the record object itself is kept only when it is not plain, see the class);
        safe to call from several threads (a list's append is atomic, so this must be too)."""
        with self._lock:
            self._append(r)

    def _append(self, r: UpdateRecord) -> None:
        if self._n == len(self._a):
            grown = np.empty((2 * len(self._a), len(self._COLS)))
            grown[:self._n] = self._a[:self._n]
            self._a = grown
        if self._plain(r):
            b = r.breakdown
            self._a[self._n] = (r.t_state, math.nan if r.t_apply is None else r.t_apply, r.compute_time, r.cost,
                                r.iterations, r.ok, *(b.get(k, math.nan) for k in BREAKDOWN_KEYS))
        else:
            self._odd[self._n] = r
        self._messages.append(r.message)
        self._n += 1

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """Bytes held by the log: its float64 columns (capacity included) and one reference per message."""
        return int(self._a.nbytes) + 8 * len(self._messages)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return UpdateLog(self[j] for j in range(*i.indices(self._n)))
        i = range(self._n)[i]  # negative indices; IndexError when out of range
        if i in self._odd:
            return self._odd[i]
        t_state, t_apply, compute_time, cost, iterations, ok, *b = self._a[i].tolist()
        b = {k: v for k, v in zip(BREAKDOWN_KEYS, b) if not math.isnan(v)}
        return UpdateRecord(t_state, None if math.isnan(t_apply) else t_apply, compute_time, cost,
                            int(iterations), bool(ok), b, self._messages[i])

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return f"UpdateLog({self._n} updates)"


@dataclass
class MPCResult:
    """Outcome of :func:`run_mpc`.

    Attributes:
      time: ``(N,)`` recorded times (s); qpos ``(N, nq)``, qvel ``(N, nv)``, ctrl ``(N, nu)``.
      metric: ``(N,)`` the task's running cost on the plant state (nan without one).
      success: whether the success test held for ``success_hold`` seconds (and, with a
        failure test, started to hold before the first failure).
      time_to_success: time (s) at which it started to hold, or None.
      time_of_failure: first time (s) the task's failure test was true (latched), or None.
      pushes: the :class:`Push` es applied to the plant.
      updates: :class:`UpdateRecord` per planner update.
      wall_time: wall seconds of the closed loop (the initial plan excluded).
      simulated_time: simulated seconds covered.
      fallback_controls: plant steps whose feedback control was not finite (feedforward used).
      mode, slowdown: as run.
      lag: sync mode: ``"measured"`` or the fixed lag (s); async: ``"real time"``.
    """

    time: np.ndarray
    qpos: np.ndarray
    qvel: np.ndarray
    ctrl: np.ndarray
    metric: np.ndarray
    success: bool
    time_to_success: float | None
    updates: list
    wall_time: float
    simulated_time: float
    fallback_controls: int
    mode: str
    slowdown: float
    mocap_pos: np.ndarray | None = None
    mocap_quat: np.ndarray | None = None
    time_of_failure: float | None = None
    pushes: tuple = ()
    lag: float | str | None = None

    @property
    def realtime_factor(self) -> float:
        """Simulated seconds per wall second of the closed loop (≥ 1 = faster than real time)."""
        return self.simulated_time / self.wall_time if self.wall_time > 0 else math.inf

    @property
    def failed_updates(self) -> int:
        """Updates that did not produce a policy."""
        return sum(not u.ok for u in self.updates)

    def recorded_bytes(self) -> int:
        """Bytes of what the run recorded on purpose: the plant arrays (time, qpos, qvel, ctrl, metric,
        mocap poses) and the update log; it grows linearly with the run's length (a long run's
        memory is bounded by what it records, see :class:`UpdateLog` and the plant's chunks)."""
        arrays = (self.time, self.qpos, self.qvel, self.ctrl, self.metric, self.mocap_pos, self.mocap_quat)
        total = sum(int(a.nbytes) for a in arrays if isinstance(a, np.ndarray))
        updates = self.updates
        return total + (updates.nbytes if isinstance(updates, UpdateLog) else 0)

    def iteration_ms(self) -> np.ndarray:
        """Wall milliseconds per update (``(n_updates,)``)."""
        return np.array([u.compute_time * 1e3 for u in self.updates])

    def policy_lag_ms(self) -> np.ndarray:
        """Simulated milliseconds from the planned-from state to application, per applied update."""
        return np.array([(u.t_apply - u.t_state) * 1e3 for u in self.updates if u.t_apply is not None])

    @property
    def replan_hz(self) -> float:
        """Planner updates applied to the plant per simulated second (the achieved MPC rate, as
        opposed to the compute rate ``1000 / iteration_ms``): ``n_applied / simulated_time``."""
        applied = sum(u.t_apply is not None for u in self.updates)
        return applied / self.simulated_time if self.simulated_time > 0 else 0.0

    def breakdown_ms(self) -> dict[str, float]:
        """Median wall milliseconds per update of each phase of the planner's breakdown."""
        keys = sorted({k for u in self.updates for k in u.breakdown})
        return {k: float(np.median([u.breakdown.get(k, 0.0) for u in self.updates]) * 1e3) for k in keys}

    def summary(self) -> dict:
        """JSON-ready summary (the ``run`` report's planner-independent keys)."""
        it = self.iteration_ms()
        lag = self.policy_lag_ms()
        finite = self.metric[np.isfinite(self.metric)]
        return {
            "success": bool(self.success),
            "time_to_success": None if self.time_to_success is None else round(float(self.time_to_success), 4),
            "time_of_failure": None if self.time_of_failure is None else round(float(self.time_of_failure), 4),
            "final_cost": float(finite[-1]) if finite.size else None,
            "iteration_ms_median": float(np.median(it)) if it.size else None,
            "iteration_ms_p95": float(np.percentile(it, 95)) if it.size else None,
            "policy_lag_ms": float(np.median(lag)) if lag.size else None,
            "realtime_factor": float(self.realtime_factor),
            "replan_hz": round(float(self.replan_hz), 2),
            "updates": len(self.updates),
            "failed_updates": self.failed_updates,
            "fallback_controls": self.fallback_controls,
            "mode": self.mode,
            "lag": self.lag,
            "slowdown": self.slowdown,
            "simulated_seconds": float(self.simulated_time),
            "breakdown_ms": self.breakdown_ms(),
        }


# --------------------------------------------------------------------------- helpers


def perturb_model(model: mujoco.MjModel, *, mass_scale: float = 1.0, friction_scale: float = 1.0,
                  gain_scale: float = 1.0, timestep: float | None = None) -> mujoco.MjModel:
    """A copy of ``model`` with model errors for robustness runs.

    Args:
      mass_scale: every body's mass and inertia multiplied by this (> 0).
      friction_scale: every geom's friction coefficients multiplied by this (> 0).
      gain_scale: every actuator's force multiplied by this (> 0): the first three gain and bias
        parameters of fixed/affine actuators (motors, position and velocity servos), so
        ``force = s·(gain·ctrl + bias)``; a servo keeps its set point and its stiffness scales.
      timestep: new ``opt.timestep`` (s, > 0), or None to keep it.

    Returns:
      a new ``MjModel`` (the argument is unchanged).

    Raises:
      ParameterError: a scale that is not a positive number; ``gain_scale`` ≠ 1 on a model with a
        muscle or user-defined actuator (whose parameters are not a force scale).
    """
    for name, v in (("mass_scale", mass_scale), ("friction_scale", friction_scale), ("gain_scale", gain_scale)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ParameterError(f"{name} must be a positive number, got {v!r}")
    m = model.__copy__()
    m.body_mass[:] *= mass_scale
    m.body_inertia[:] *= mass_scale
    m.geom_friction[:] *= friction_scale
    if gain_scale != 1.0:
        linear = (int(mujoco.mjtGain.mjGAIN_FIXED), int(mujoco.mjtGain.mjGAIN_AFFINE))
        biases = (int(mujoco.mjtBias.mjBIAS_NONE), int(mujoco.mjtBias.mjBIAS_AFFINE))
        for i in range(m.nu):
            if int(m.actuator_gaintype[i]) not in linear or int(m.actuator_biastype[i]) not in biases:
                name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, i) or f"#{i}"
                raise ParameterError(f"gain_scale: actuator {name} is not a motor or servo (muscle or "
                                     "user gain/bias); its force cannot be scaled")
        m.actuator_gainprm[:, :3] *= gain_scale
        m.actuator_biasprm[:, :3] *= gain_scale
    if timestep is not None:
        if not (math.isfinite(timestep) and timestep > 0):
            raise ParameterError(f"timestep must be positive, got {timestep!r}")
        m.opt.timestep = float(timestep)
    return m


def model_error(mass_scale: float = 1.0, friction_scale: float = 1.0, gain_scale: float = 1.0,
                latency: float = 0.0) -> dict:
    """The plant's model errors of a run as its report gives them: the entries that differ from
    the nominal (1 for the scales, 0 s for ``latency``); ``{}`` for a nominal run.

    Raises:
      ParameterError: a scale that is not a positive number, a latency that is not ≥ 0 s.
    """
    for name, v in (("mass_scale", mass_scale), ("friction_scale", friction_scale), ("gain_scale", gain_scale)):
        if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ParameterError(f"{name} must be a positive number, got {v!r}")
    if isinstance(latency, bool) or not (isinstance(latency, (int, float)) and math.isfinite(latency)
                                         and latency >= 0):
        raise ParameterError(f"latency must be seconds >= 0, got {latency!r}")
    values = {"mass_scale": mass_scale, "friction_scale": friction_scale, "gain_scale": gain_scale,
              "latency": latency}
    nominal = {"latency": 0.0}
    return {k: float(v) for k, v in values.items() if v != nominal.get(k, 1.0)}


class _Plant:
    """Plant-side bookkeeping shared by both modes: stepping, pushes, recording, success."""

    def __init__(self, model, data, settings: MPCSettings, success, metric, failure=None, step=None):
        self.model, self.data, self.s = model, data, settings
        self.step_fn = step
        self.h = float(model.opt.timestep)
        self.n = max(1, int(round(settings.duration / self.h)))
        self.rec_stride = max(1, int(round(settings.record_period / self.h)))
        # the recording is a list of fixed-size chunks, one more allocated whenever the last is
        # full and none ever copied or freed during the run (:meth:`_grow`): the run length is
        # bounded by the memory of what was recorded, never by an up-front allocation, and a long
        # run's memory follows its data (growing buffers by reallocation left the freed copies
        # in the C heap: a 10-minute quadruped soak grew by about twice its 27 MB of data)
        self.nrec_max = self.n // self.rec_stride + 2
        self.chunk = min(self.nrec_max, RECORD_CHUNK)
        self._widths = {"t": (), "qpos": (model.nq,), "qvel": (model.nv,), "ctrl": (model.nu,), "metric": ()}
        self._chunks: dict[str, list] = {name: [] for name in self._widths}
        self.nrec = 0
        self._grow()
        self.success_fn, self.metric_fn, self.failure_fn = success, metric, failure
        self.success_since: float | None = None
        self.succeeded_at: float | None = None
        self.failed_at: float | None = None
        self.fallbacks = 0
        self.nx = model.nq + model.nv + model.na
        self._x = np.empty(self.nx)
        self.pushes = []
        for p in settings.pushes:
            bid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, p.body)
            if bid < 0:
                raise ParameterError(f"push on body {p.body!r}: the plant model has no such body")
            w = np.concatenate([as_array("push force", p.force, (3,)), as_array("push torque", p.torque, (3,))])
            self.pushes.append((p.time, p.time + p.duration, bid, w))
        self.last_u = np.zeros(model.nu)

    def state(self) -> np.ndarray:
        d, nq, nv = self.data, self.model.nq, self.model.nv
        x = self._x
        x[:nq] = d.qpos
        x[nq:nq + nv] = d.qvel
        if self.model.na:
            x[nq + nv:] = d.act
        return x.copy()

    def control(self, policy: Policy, t: float, x: np.ndarray) -> np.ndarray:
        u = policy.control(t, x)
        if not np.all(np.isfinite(u)):
            self.fallbacks += 1
            u = policy.feedforward(t)
            if not np.all(np.isfinite(u)):
                u = self.last_u
        self.last_u = u
        return u

    def record(self, k: int, u) -> None:
        if k % self.rec_stride and k != self.n:
            return
        i, d = self.nrec, self.data
        c, j = divmod(i, self.chunk)
        if c >= len(self._chunks["t"]):
            self._grow()
        ch = self._chunks
        ch["t"][c][j] = d.time
        ch["qpos"][c][j] = d.qpos
        ch["qvel"][c][j] = d.qvel
        ch["ctrl"][c][j] = u
        if self.metric_fn is not None:
            ch["metric"][c][j] = self.metric_fn(self.model, d)
        self.nrec += 1

    def _grow(self) -> None:
        """Append one chunk of :attr:`chunk` rows to every recorded column (``metric`` NaN-filled)."""
        for name, width in self._widths.items():
            fill = np.nan if name == "metric" else 0.0
            self._chunks[name].append(np.full((self.chunk,) + width, fill))

    def recorded(self, name: str) -> np.ndarray:
        """The first :attr:`nrec` rows of column ``name`` (``t``, ``qpos``, ``qvel``, ``ctrl``,
        ``metric``) as one new array."""
        parts = self._chunks[name]
        n = self.nrec
        if not n:
            return parts[0][:0].copy()
        full, rest = divmod(n, self.chunk)
        out = np.concatenate(parts[:full] + ([parts[full][:rest]] if rest else []))
        return out

    def step(self, k: int, u) -> None:
        d, t = self.data, self.data.time
        d.ctrl[:] = u
        if self.pushes:
            d.xfrc_applied[:] = 0.0
            for t0, t1, bid, w in self.pushes:
                if t0 <= t < t1:
                    d.xfrc_applied[bid] += w
        bad = d.warning[mujoco.mjtWarning.mjWARN_BADQACC].number
        if self.step_fn is None:
            mujoco.mj_step(self.model, d)
        else:
            try:
                self.step_fn(d)
            except ContactoptError as e:   # e.g. the smooth contact model's NonFiniteError
                raise SimulationError(f"the plant diverged at t = {t:.4f} s: {e}") from None
        # MuJoCo resets a diverged state to qpos0 with a warning instead of returning NaN
        if d.warning[mujoco.mjtWarning.mjWARN_BADQACC].number != bad or not (
                np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all()):
            raise SimulationError(f"the plant diverged at t = {t:.4f} s (non-finite state)")
        if self.failed_at is None and self.failure_fn is not None and self.failure_fn(self.model, d):
            self.failed_at = float(d.time)  # latched: no success can start after a failure
        if self.success_fn is not None and self.failed_at is None:
            if self.success_fn(self.model, d):
                if self.success_since is None:
                    self.success_since = d.time
                if self.succeeded_at is None and d.time - self.success_since >= self.s.success_hold - 1e-12:
                    self.succeeded_at = self.success_since
            else:
                self.success_since = None

    def done_early(self) -> bool:
        return ((self.s.stop_on_success and self.succeeded_at is not None)
                or (self.s.stop_on_failure and self.failed_at is not None))

    def result(self, updates, wall, mode) -> MPCResult:
        n = self.nrec
        d = self.data
        t = self.recorded("t")
        return MPCResult(t, self.recorded("qpos"), self.recorded("qvel"), self.recorded("ctrl"),
                         self.recorded("metric"), self.succeeded_at is not None, self.succeeded_at, updates,
                         wall, float(d.time - t[0]) if n else 0.0, self.fallbacks, mode, self.s.slowdown,
                         d.mocap_pos.copy() if self.model.nmocap else None,
                         d.mocap_quat.copy() if self.model.nmocap else None, self.failed_at,
                         tuple(self.s.pushes), self.s.lag if mode == "sync" else "real time")


#: contact models a plant can be stepped with (:func:`plant_stepper`)
PLANT_CONTACTS = ("mujoco", "smooth")


def plant_stepper(model: mujoco.MjModel, contact: str = "mujoco", *, eta: float = 0.7,
                  beta: float = 0.01) -> Callable | None:
    """How the plant is stepped: None for MuJoCo's own ``mj_step`` (``contact="mujoco"``), or, for
    ``contact="smooth"``, one step of the iLQG paper's smooth contact model
    (:meth:`SmoothContactDynamics.step_data <contactopt.contact.smooth.SmoothContactDynamics.step_data>`
    with η = ``eta``, the paper's simulator 0.7, and β = ``beta`` [m/s]) followed by the derived
    quantities of the new state, for :func:`run_mpc`'s ``plant_step``.

    Raises:
      ParameterError: an unknown contact model or bad η/β.
    """
    if contact not in PLANT_CONTACTS:
        raise ParameterError(f"plant contact must be one of {', '.join(PLANT_CONTACTS)}; got {contact!r}")
    if contact == "mujoco":
        return None
    from ..contact.smooth import SmoothContactDynamics, SmoothContactModel

    smooth = SmoothContactDynamics(model, SmoothContactModel(eta=eta, beta=beta))

    def step(data: mujoco.MjData) -> None:
        smooth.step_data(data, forward=True)

    return step


def _observe_lag(planner, lag: float) -> None:
    """Tell a planner that wants it (an ``observe_lag(seconds)`` method, e.g. the iLQG
    planner's lag compensation) the policy lag of its last applied update."""
    observe = getattr(planner, "observe_lag", None)
    if observe is not None:
        observe(float(lag))


def seconds_or_zero(value) -> float:
    """``value`` as seconds: 0 for None or a value that is not a finite number ≥ 0."""
    try:
        value = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) and value >= 0 else 0.0


def _planner_seconds(planner, name: str) -> float:
    """The planner's attribute ``name`` as seconds (:func:`seconds_or_zero`; 0 when it has none)."""
    return seconds_or_zero(getattr(planner, name, 0.0))


def planner_update_period(planner, settings: MPCSettings) -> float:
    """Simulated seconds between the states an update plans from: the larger of
    ``settings.update_period`` and the planner's ``update_period`` attribute (0 when it has
    none, or a value that is not a finite number ≥ 0)."""
    return max(float(settings.update_period), _planner_seconds(planner, "update_period"))


def planner_min_lag(planner) -> float:
    """The planner's ``min_lag`` attribute [s] (0 when it has none, or a value that is not a
    finite number ≥ 0): a new policy takes effect no earlier than this long after the state it
    was planned from, in both modes (the lag reported to ``observe_lag`` includes it).  An IDTO
    plan's first knot interval starts at the measured state; a planner tuned on policies that take
    over at their first knot (the IDTO hopper) sets ``min_lag = h`` so that a faster update does
    not hand the plant that first interval."""
    return _planner_seconds(planner, "min_lag")


def next_update_start(previous: float, period: float, t: float) -> float:
    """The update-period grid's next instant after an update planned from the state at ``t``
    [s]: ``previous + period``, or ``t`` when the planner was late (the grid starts again from
    now rather than letting updates catch up back to back).  ``previous`` = −∞ starts a new
    grid at ``t + period``.  Shared by the async loop, the live loop and the remote clients."""
    if not math.isfinite(previous):
        return t + period
    return max(previous + period, t)


def pop_newest_due(waiting: list, t: float):
    """Of ``waiting`` (tuples whose last item is the time [s] each takes effect, oldest first),
    the newest whose time has come by ``t``, or None; it and the older ones due leave the list
    (superseded, never applied).  Shared by the async loop, the live loop and the remote client
    for plans held back by a planner's ``min_lag``."""
    due = [w for w in waiting if t >= w[-1] - 1e-9]
    if not due:
        return None
    waiting[:] = [w for w in waiting if t < w[-1] - 1e-9]
    return due[-1]


def _check_update(upd) -> PlannerUpdate:
    if not isinstance(upd, PlannerUpdate):
        raise ContactoptError(f"planner returned {type(upd).__name__}, expected a PlannerUpdate")
    return upd


# --------------------------------------------------------------------------- run


def run_mpc(planner: Planner, plant_model: mujoco.MjModel, plant_data: mujoco.MjData,
            settings: MPCSettings, *, success: Callable | None = None,
            metric: Callable | None = None, failure: Callable | None = None,
            plant_step: Callable | None = None) -> MPCResult:
    """Run receding-horizon control of ``plant_model`` with ``planner``.

    Args:
      planner: a :class:`Planner` whose states are the plant's ``[qpos, qvel, act]``.
      plant_model, plant_data: the plant; ``plant_data`` holds the initial state and is
        advanced in place (``data.time`` is the clock).
      settings: :class:`MPCSettings`.
      success: ``success(model, data) -> bool``, the task's test on the plant state.
      metric: ``metric(model, data) -> float``, the task's running cost, recorded.
      failure: ``failure(model, data) -> bool``, the task's failure test (e.g. "fell"),
        checked after every plant step and latched at its first true: a success must have
        started to hold before it (``MPCResult.time_of_failure``).
      plant_step: ``plant_step(data)`` advances the plant by one step of ``plant_model.opt.timestep``
        in place, derived quantities included (default ``mj_step``); e.g. :func:`plant_stepper`
        for the smooth contact model.  A :class:`~contactopt.errors.ContactoptError` it raises
        ends the run as a :class:`SimulationError`.

    Returns:
      :class:`MPCResult`.

    Raises:
      NonFiniteError: the initial state is not finite.
      ContactoptError: the initial plan failed, or ``max_failed_updates`` updates in a row failed.
      SimulationError: the plant diverged.
    """
    if not isinstance(settings, MPCSettings):
        raise ParameterError(f"settings must be MPCSettings, got {type(settings).__name__}")
    if not (np.isfinite(plant_data.qpos).all() and np.isfinite(plant_data.qvel).all()):
        raise NonFiniteError("initial plant state is not finite")
    plant = _Plant(plant_model, plant_data, settings, success, metric, failure, plant_step)
    mujoco.mj_forward(plant_model, plant_data)
    t0 = float(plant_data.time)
    first = _check_update(planner.reset(t0, plant.state()))
    if first.policy is None:
        raise ContactoptError(f"the initial plan failed: {first.message or 'no policy'}")
    updates = UpdateLog([UpdateRecord(t0, t0, first.compute_time, first.cost, first.iterations, True,
                                      first.breakdown, first.message)])
    if settings.mode == "sync":
        wall = _run_sync(planner, plant, first.policy, updates, settings)
    else:
        wall = _run_async(planner, plant, first.policy, updates, settings)
    return plant.result(updates[1:], wall, settings.mode)


def _run_sync(planner, plant: _Plant, policy: Policy, updates: list, s: MPCSettings) -> float:
    d = plant.data
    pending: list[tuple[float, int, Policy]] = []  # (t_apply, update index, policy)
    next_start = float(d.time)
    failures = 0
    start = time.perf_counter()
    for k in range(plant.n):
        t = float(d.time)
        if t >= next_start - 1e-9:
            upd = _check_update(planner.update(t, plant.state()))
            lag = upd.compute_time / s.slowdown if s.lag == "measured" else float(s.lag)
            ok = upd.policy is not None
            # ``min_lag`` (the planner's own) holds the policy back, and the planner observes that
            # lag, not ``added_latency`` (below); the next update may still start once this one is done
            held_lag = max(lag, planner_min_lag(planner))
            delay = held_lag + s.added_latency
            updates.append(UpdateRecord(t, t + delay if ok else None, upd.compute_time, upd.cost, upd.iterations,
                                        ok, upd.breakdown, upd.message))
            if ok:
                pending.append((t + delay, len(updates) - 1, upd.policy))
                _observe_lag(planner, held_lag)
                failures = 0
            else:
                failures += 1
                if failures >= s.max_failed_updates:
                    raise ContactoptError(f"{failures} planner updates in a row failed (last: {upd.message})")
            # updates start on the grid of the update period (so a period that is not a multiple of
            # the plant step still gives its rate on average), never before the planner is done
            next_start = max(t + lag, next_start + planner_update_period(planner, s))
        while pending and pending[0][0] <= t + 1e-12:
            _, _, policy = pending.pop(0)
        x = plant.state()
        u = plant.control(policy, t, x)
        plant.record(k, u)
        plant.step(k, u)
        if plant.done_early():
            break
    plant.record(plant.n, plant.last_u)
    return time.perf_counter() - start


#: Seconds an async planner that is done before the plant has moved waits for the next plant
#: step before it re-solves the same state.
REPLAN_WAIT = 0.001


def _run_async(planner, plant: _Plant, policy: Policy, updates: list, s: MPCSettings) -> float:
    d = plant.data
    lock = threading.Lock()
    # the plant notifies after every step.  A planner that is done before the plant has moved waits
    # (without the interpreter lock) for the next step, at most REPLAN_WAIT, and then re-solves the
    # same state (more iterations on it): re-solving in a tight loop kept the plant thread waiting
    # for the lock (a 0.04 ms GDD update ran the humanoid at 2 % of real time)
    stepped = threading.Condition(lock)
    shared = {"t": float(d.time), "x": plant.state(), "policy": policy, "new": None, "stop": False,
              "error": None, "failures": 0}

    def planner_loop():
        last_t = None
        next_start = -math.inf  # the update-period grid (as in sync mode): none yet
        try:
            while True:
                period = planner_update_period(planner, s)
                with stepped:
                    if period > 0:  # wait for the grid's next instant, no re-solves
                        while not shared["stop"] and shared["t"] < next_start - 1e-9:
                            stepped.wait(0.05)
                    elif not shared["stop"] and shared["t"] == last_t:
                        stepped.wait(REPLAN_WAIT)
                    if shared["stop"]:
                        return
                    t, x = shared["t"], shared["x"]
                last_t = t
                next_start = next_update_start(next_start, period, t)
                upd = _check_update(planner.update(t, x))
                with lock:
                    if upd.policy is not None:
                        shared["new"] = (upd, t)  # the plant stamps the application time
                        shared["failures"] = 0
                    else:
                        updates.append(UpdateRecord(t, None, upd.compute_time, upd.cost, upd.iterations, False,
                                                    upd.breakdown, upd.message))
                        shared["failures"] += 1
                        if shared["failures"] >= s.max_failed_updates:
                            raise ContactoptError(
                                f"{shared['failures']} planner updates in a row failed (last: {upd.message})")
        except BaseException as exc:  # reported by the plant thread
            with lock:
                shared["error"] = exc
                shared["stop"] = True

    thread = threading.Thread(target=planner_loop, name="contactopt-planner", daemon=True)
    waiting: list = []  # (update, t_state, t_due) of plans waiting for the planner's ``min_lag``, oldest first
    start = time.perf_counter()
    t_start = float(d.time)
    thread.start()
    try:
        for k in range(plant.n):
            t = float(d.time)
            if s.slowdown > 0:
                ahead = start + (t - t_start) * s.slowdown - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
            with lock:
                if shared["error"] is not None:
                    break
                new = shared["new"]
                shared["new"] = None
            if new is not None:  # each plan waits for its ``min_lag``
                waiting.append((new[0], new[1], new[1] + planner_min_lag(planner)))
            due = pop_newest_due(waiting, t)
            if due is not None:
                upd, t_state, _ = due
                policy = upd.policy
                updates.append(UpdateRecord(t_state, t, upd.compute_time, upd.cost, upd.iterations, True,
                                            upd.breakdown, upd.message))
                _observe_lag(planner, t - t_state)
            x = plant.state()
            u = plant.control(policy, t, x)
            plant.record(k, u)
            plant.step(k, u)
            with stepped:
                shared["t"], shared["x"] = float(d.time), plant.state()
                stepped.notify()
            if plant.done_early():
                break
    finally:
        with stepped:
            shared["stop"] = True
            stepped.notify()
        wall = time.perf_counter() - start
        thread.join()
    if shared["error"] is not None:
        raise shared["error"]
    plant.record(plant.n, plant.last_u)
    return wall


def find_min_slowdown(run: Callable[[float], MPCResult], candidates=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0)
                      ) -> tuple[float | None, dict]:
    """The smallest slowdown at which a task still succeeds ("how much faster must the computer be").

    Args:
      run: ``run(slowdown) -> MPCResult`` (typically async mode, a fixed seed).
      candidates: slowdowns tried in increasing order.

    Returns:
      ``(slowdown or None, {slowdown: success})`` — None when none of them succeeded.
    """
    tried = {}
    for sd in sorted(candidates):
        res = run(float(sd))
        tried[float(sd)] = bool(res.success)
        if res.success:
            return float(sd), tried
    return None, tried

