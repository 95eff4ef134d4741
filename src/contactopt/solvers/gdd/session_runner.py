"""Running and reporting scripted GDD reaching sessions: :func:`run_session`,
:class:`SessionResult` (time series and report), :func:`gdd_statistics` and :func:`plot_session`
(see :mod:`contactopt.solvers.gdd.sessions`).

Memory: the report's figures come from running summaries (:class:`_SessionSummary`) that see
every step in memory bounded in the session's length; the arrays hold every step only for
sessions of at most :data:`STEP_RECORD_LIMIT` steps (or with ``record="steps"``), else the
series fields at the series rate (issue 26: a 10-minute humanoid-reach soak grew +24 % RSS
when every 5 ms step was kept; docs/experiments/fuzz-and-soak.md)."""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

import mujoco
import numpy as np

from ...errors import ContactoptError, ParameterError
from ...model import model_name
from ...progress import progress_bar
from .reach_session import ReachSession
from .reach_spec import ReachSpec
from .solver import GDDStatus, gdd_step

__all__ = ["STEP_ONLY_FIELDS", "STEP_RECORD_LIMIT", "SessionResult", "gdd_statistics", "plot_session",
           "run_session"]


# --------------------------------------------------------------------------- recording policy

#: ``record="auto"`` keeps every step's arrays for sessions of at most this many steps (82 s of
#: the humanoid's 5 ms steps, ~22 MB) and records the series only for longer ones; it is also
#: the size of the solver statistics' reservoir, so the statistics of such sessions are exact
STEP_RECORD_LIMIT = 2 ** 14

#: rows of :attr:`SessionResult.arrays` kept only with ``record="steps"`` (the full state)
STEP_ONLY_FIELDS = ("qpos", "qvel", "qacc", "qacc_forward", "ctrl", "qfrc_actuator", "goal", "qref", "frame_pos")

_RECORD_MODES = ("auto", "steps", "series")


def _record_fields(model, n_mon: int, n_sup: int) -> dict:
    """Recorded fields: name → (trailing shape, dtype, fill of unwritten rows), in report order."""
    nq, nv, nu = model.nq, model.nv, model.nu
    nan, f, i32 = np.nan, np.float64, np.int32
    return {
        "time": ((), f, 0.0), "qpos": ((nq,), f, nan), "qvel": ((nv,), f, nan), "qacc": ((nv,), f, nan),
        "qacc_forward": ((nv,), f, nan), "ctrl": ((nu,), f, nan), "qfrc_actuator": ((nv,), f, nan),
        "active": ((), i32, -1), "goal": ((3,), f, nan), "qref": ((nq,), f, nan), "frame_pos": ((3,), f, nan),
        "goal_distance": ((), f, nan), "target_distance": ((), f, nan), "heights": ((n_mon,), f, nan),
        "support": ((n_sup,), bool, False), "status": ((), np.int8, 0), "iterations": ((), i32, 0),
        "dual_updates": ((), i32, 0), "factorizations": ((), i32, 0), "nefc": ((), i32, 0), "ncon": ((), i32, 0),
        "physics_violation": ((), f, nan), "residual_gradient": ((), f, nan), "solve_time": ((), f, nan),
        "step_time": ((), f, nan),
    }


class _SeriesArrays(dict):
    """``arrays`` of a session recorded with ``record="series"`` (rows every ``stride`` steps):
    asking for a field of :data:`STEP_ONLY_FIELDS` says why it is missing instead of a bare ``KeyError``."""

    def __init__(self, arrays: dict, stride: int):
        super().__init__(arrays)
        self.stride = int(stride)

    def __missing__(self, key):
        if key in STEP_ONLY_FIELDS:
            raise KeyError(f"{key!r} was not recorded: this session recorded only the series (every "
                           f"{getattr(self, 'stride', '?')} steps); run it with record='steps' for every "
                           "step's state")
        raise KeyError(key)


# --------------------------------------------------------------------------- running summaries


class _Reservoir:
    """Bounded summary of a stream of rows of scalars (one column per statistic).

    Keeps the row count, each column's count and sum of finite values, and a uniform random
    sample of at most ``capacity`` rows (reservoir sampling, Li's "Algorithm L", seeded: the
    same stream gives the same sample).  While ``count <= capacity`` the sample *is* the stream,
    in order, and every statistic is exact; after that percentiles come from the sample and
    means from the running sums.  Memory: ``capacity × columns`` float64, grown by doubling.
    """

    def __init__(self, columns, capacity: int, seed: int = 0):
        self.columns = tuple(columns)
        self.capacity = max(1, int(capacity))
        self.rows = np.empty((min(self.capacity, 256), len(self.columns)))
        self.count = 0
        self.finite = [0] * len(self.columns)
        self.sums = [0.0] * len(self.columns)
        self._rng = random.Random(seed)
        self._w = 1.0
        self._next = -1

    def _skip(self) -> None:
        """Algorithm L: the next row index that replaces a sampled row, and the new weight."""
        rng, k = self._rng, self.capacity
        self._w *= math.exp(math.log(1.0 - rng.random()) / k)
        lw = math.log1p(-self._w) if self._w < 1.0 else -math.inf
        gap = math.log(1.0 - rng.random()) / lw if lw < 0.0 else math.inf
        self._next += (int(gap) if gap < 2.0 ** 62 else 2 ** 62) + 1

    def add(self, row) -> None:
        """Add one row (a sequence of ``len(columns)`` numbers; NaN/inf count as missing)."""
        i = self.count
        self.count = i + 1
        for j, v in enumerate(row):
            if math.isfinite(v):
                self.finite[j] += 1
                self.sums[j] += v
        k = self.capacity
        if i < k:
            if i == len(self.rows):
                grown = np.empty((min(2 * i, k), len(self.columns)))
                grown[:i] = self.rows
                self.rows = grown
            self.rows[i] = row
            if i == k - 1:
                self._next = i
                self._skip()
        elif i == self._next:
            self.rows[self._rng.randrange(k)] = row
            self._skip()

    @property
    def exact(self) -> bool:
        """Whether the sample is the whole stream (statistics exact)."""
        return self.count <= self.capacity

    def values(self, column: str) -> np.ndarray:
        """Finite sampled values ``(≤ capacity,)`` of a column (all of them while :attr:`exact`)."""
        x = self.rows[:min(self.count, self.capacity), self.columns.index(column)]
        return x[np.isfinite(x)]

    def percentile(self, column: str, q: float) -> float | None:
        """``q``-th percentile (linear interpolation) of the column's finite values; None if none."""
        x = self.values(column)
        return float(np.percentile(x, q)) if x.size else None

    def mean(self, column: str) -> float | None:
        """Mean of the column's finite values (exact; running sum once sampled); None if none."""
        if self.exact:
            x = self.values(column)
            return float(np.mean(x)) if x.size else None
        j = self.columns.index(column)
        return self.sums[j] / self.finite[j] if self.finite[j] else None


_SOLVER_COLUMNS = ("iterations", "dual_updates", "nefc", "physics_violation", "residual_gradient")
_TIMING_COLUMNS = ("solve_time", "step_time")


class _SessionSummary:
    """What a session's report needs of its steps, in memory bounded in the session's length.

    Per step (:meth:`add_step`): the step count, converged solves, steps with every support
    body in contact, the solver statistics and times (:class:`_Reservoir` s of ``capacity``
    rows, default :data:`STEP_RECORD_LIMIT`; the first step's times, which include loading the
    compiled kernels, are kept aside), and per drag the first/last/smallest distance to its final
    target (m), the time of its last step (s) and when it first came within ``tolerance`` (s).
    """

    def __init__(self, n_drags: int, n_support: int, tolerance: float, capacity: int | None = None):
        capacity = STEP_RECORD_LIMIT if capacity is None else capacity
        self.steps = 0
        self.converged = 0
        self.supported = 0
        self.n_support = int(n_support)
        self.tolerance = float(tolerance)
        self.solver = _Reservoir(_SOLVER_COLUMNS, capacity, seed=0)
        self.timing = _Reservoir(_TIMING_COLUMNS, capacity, seed=1)
        self._first_timing = None
        nan = np.nan
        self.drag_steps = np.zeros(n_drags, dtype=np.int64)
        self.drag_first = np.full(n_drags, nan)
        self.drag_last = np.full(n_drags, nan)
        self.drag_min = np.full(n_drags, nan)
        self.drag_last_time = np.full(n_drags, nan)
        self.drag_reached_time = np.full(n_drags, nan)

    def add_step(self, t, active, target_distance, status, iterations, dual_updates, nefc, physics_violation,
                 residual_gradient, solve_time, step_time, support=None) -> None:
        """Summarize one step taken: ``t`` (s, before the step), ``active`` drag (−1: none),
        ``target_distance`` (m, to the active drag's final position), the step's solver
        statistics (``status`` a :class:`GDDStatus` value, counts, m/s², N, s) and
        ``support`` ``(n_support,)`` bool contacts (None without support bodies)."""
        self.steps += 1
        self.converged += int(status) == int(GDDStatus.CONVERGED)
        if self.n_support and support is not None and bool(np.all(support)):
            self.supported += 1
        self.solver.add((iterations, dual_updates, nefc, physics_violation, residual_gradient))
        if self._first_timing is None:
            self._first_timing = (solve_time, step_time)
        else:
            self.timing.add((solve_time, step_time))
        if active >= 0:
            k, dist = int(active), float(target_distance)
            if self.drag_steps[k] == 0:
                self.drag_first[k] = self.drag_min[k] = dist
            elif not math.isnan(self.drag_min[k]) and (dist < self.drag_min[k] or math.isnan(dist)):
                self.drag_min[k] = dist  # NaN sticks, as in np.min
            self.drag_steps[k] += 1
            self.drag_last[k] = dist
            self.drag_last_time[k] = t
            if dist <= self.tolerance and math.isnan(self.drag_reached_time[k]):
                self.drag_reached_time[k] = t

    @classmethod
    def from_arrays(cls, a: dict, n_drags: int, tolerance: float) -> _SessionSummary:
        """The summary of per-step arrays (every step recorded, see :class:`SessionResult`), exact."""
        n = int(a["time"].shape[0])
        sup = a.get("support")
        n_sup = 0 if sup is None or sup.ndim < 2 else sup.shape[1]
        s = cls(n_drags, n_sup, tolerance, capacity=max(n, 1))
        cols = [a[key].tolist() for key in ("time", "active", "target_distance", "status", *_SOLVER_COLUMNS,
                                            *_TIMING_COLUMNS)]
        for k, row in enumerate(zip(*cols)):
            s.add_step(*row, support=sup[k] if n_sup else None)
        return s

    def goal_results(self, spec: ReachSpec, timestep: float) -> list[dict]:
        """Per drag of ``spec``: see :meth:`SessionResult.goal_results`."""
        out = []
        for k, dr in enumerate(spec.drags):
            seen = k < len(self.drag_steps) and self.drag_steps[k] > 0
            row = {"frame": dr.frame, "offset": list(dr.offset), "start": dr.start, "end": dr.end,
                   "completed": bool(seen and self.drag_last_time[k] + timestep >= dr.end - 1e-9)}
            if seen:
                hit = self.drag_reached_time[k]
                row.update(initial_distance=float(self.drag_first[k]), final_distance=float(self.drag_last[k]),
                           min_distance=float(self.drag_min[k]), reached=bool(not math.isnan(hit)),
                           time_reached=None if math.isnan(hit) else float(hit))
            else:
                row.update(initial_distance=None, final_distance=None, min_distance=None,
                           reached=False, time_reached=None)
            out.append(row)
        return out

    def support_contact_fraction(self) -> float | None:
        """Fraction of the steps with every support body in contact (None without support bodies or steps)."""
        return self.supported / self.steps if self.n_support and self.steps else None

    def gdd_statistics(self) -> dict:
        """The report's ``gdd`` entry: see :func:`gdd_statistics`."""
        if self.steps == 0:
            return {}
        out = {}
        for key, name in (("iterations", "iterations"), ("dual_updates", "dual_updates"),
                          ("nefc", "constraints"), ("physics_violation", "physics_violation"),
                          ("residual_gradient", "residual_gradient")):
            out[f"{name}_median"] = self.solver.percentile(key, 50)
            out[f"{name}_p95"] = self.solver.percentile(key, 95)
        out["converged_fraction"] = self.converged / self.steps
        timing = self.timing
        if self.steps == 1:  # only the first step: its times are all there is
            timing = _Reservoir(_TIMING_COLUMNS, 1)
            timing.add(self._first_timing)
        for key, name in (("solve_time", "solve_us"), ("step_time", "step_us")):
            x = timing.values(key)
            mean = timing.mean(key)
            out[f"{name}_median"] = 1e6 * float(np.median(x)) if x.size else None
            out[f"{name}_mean"] = 1e6 * mean if mean is not None else None
        return out


# --------------------------------------------------------------------------- results


@dataclass
class SessionResult:
    """A session's recorded series and running summaries (``N`` = :attr:`steps` steps taken).

    ``arrays`` holds rows of the state *before* a step, one row per recorded step: every step
    (``record == "steps"``, ``stride`` 1, ``R = N`` rows) or every ``stride``-th step from step 0
    (``record == "series"``, ``R = ⌈N / stride⌉`` rows, only the fields *not* in
    :data:`STEP_ONLY_FIELDS`).  Report statistics come from ``summary``, which sees every step.

    Attributes:
      spec: the :class:`ReachSpec`.  model: model name.  timestep: h in s.
      arrays (each also an attribute): time ``(R,)`` s; qpos ``(R, nq)``; qvel ``(R, nv)``; qacc
      ``(R, nv)`` the goal-directed acceleration a (m/s², rad/s²); qacc_forward ``(R, nv)``; ctrl
      ``(R, nu)`` applied controls; qfrc_actuator ``(R, nv)`` τ, the generalized actuator force
      (N, N·m); active ``(R,)`` index of the active drag (−1: none); goal ``(R, 3)`` dragged goal
      (NaN without one); qref ``(R, nq)`` posture reference; frame_pos ``(R, 3)`` position of
      the active frame; goal_distance ``(R,)`` m to the dragged goal; target_distance ``(R,)`` m
      to the drag's final position; heights ``(R, n_fall + n_drop)`` m of the monitored bodies;
      support ``(R, n_support)`` bool contacts of the support bodies.
      Solver statistics ``(R,)``: status, iterations, dual_updates, factorizations, nefc,
      ncon, physics_violation (m/s²), residual_gradient (N), solve_time (s), step_time (s).
      falls: ``[(time, body)]``; drops: ``[(time, body)]``.
      drag_origin ``(n_drags, 3)``: frame position when each drag started (NaN if never).
      error: message when the session stopped early on an error (the step was not taken).
      wall_time: s.  video_frames: frames written.
      n_steps: steps taken (default: the rows of ``arrays``, every step recorded).
      record: ``"steps"`` or ``"series"``.  stride: steps per row of ``arrays``.
      summary: the running summaries (default: computed from ``arrays``, which then must hold
      every step).
    """

    spec: ReachSpec
    model: str
    timestep: float
    arrays: dict
    falls: list = field(default_factory=list)
    drops: list = field(default_factory=list)
    drag_origin: np.ndarray | None = None
    error: str | None = None
    wall_time: float = 0.0
    video_frames: int = 0
    n_steps: int | None = None
    record: str = "steps"
    stride: int = 1
    summary: _SessionSummary | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.n_steps is None:
            if self.stride != 1:
                raise ParameterError("SessionResult: n_steps is required when arrays hold every stride-th step")
            self.n_steps = int(self.arrays["time"].shape[0])
        if self.summary is None:
            if self.stride != 1:
                raise ParameterError("SessionResult: summary is required when arrays hold every stride-th step")
            self.summary = _SessionSummary.from_arrays(self.arrays, len(self.spec.drags), self.spec.reach_tolerance)

    def __getattr__(self, name):
        arrays = self.__dict__.get("arrays")
        if arrays is not None and name in arrays:
            return arrays[name]
        if name in STEP_ONLY_FIELDS and self.__dict__.get("record") == "series":
            raise AttributeError(f"{name!r} was not recorded: this session recorded only the series (every "
                                 f"{self.__dict__.get('stride')} steps); run it with record='steps'")
        raise AttributeError(name)

    @property
    def steps(self) -> int:
        """Number of steps taken."""
        return int(self.n_steps)

    def goal_results(self) -> list[dict]:
        """Per drag: frame, start/end s, initial and final distance to the final target (m),
        the smallest distance, whether and when it came within ``reach_tolerance`` (from every
        step, whatever was recorded)."""
        return self.summary.goal_results(self.spec, self.timestep)

    def report(self, *, task: str | None = None, planner: str = "gdd", series_rate: float = 20.0) -> dict:
        """JSON-ready report (the task runner contract plus goal distances, falls and GDD stats).

        Keys: task, planner, model, success, time_to_success (s or None), seconds, steps,
        goals (per drag, see :meth:`goal_results`), goals_reached, goal_distance_{initial,final}_mean
        (m), falls, drops (lists of {time, body}), support_contact_fraction, gdd (iterations
        median/p95, dual updates, constraints, physics violation median/p95, residual gradient
        median/p95, converged fraction, µs per solve and per step; see :func:`gdd_statistics`:
        exact for sessions of at most :data:`STEP_RECORD_LIMIT` steps, the percentiles of longer
        ones from a uniform sample of that many steps), error, and a time series ``series``
        (time, goal_distance, target_distance, active) sampled every
        ``max(1, round(1 / (series_rate · h)))`` steps (rounded to a multiple of ``stride``).
        """
        a = self.arrays
        goals = self.goal_results()
        completed = [g for g in goals if g["completed"]]
        ok = (self.error is None and not self.falls and not self.drops and bool(completed)
              and all(g["reached"] for g in completed))
        t_success = max(g["time_reached"] for g in completed) if ok else None
        n = self.steps
        stride = max(1, int(round(1.0 / (series_rate * self.timestep))))
        idx = np.arange(0, len(a["time"]), max(1, round(stride / self.stride)))

        def clean(x):
            return [None if not np.isfinite(v) else round(float(v), 6) for v in x]

        report = {
            "task": task or self.spec.name,
            "planner": planner,
            "model": self.model,
            "success": bool(ok),
            "time_to_success": t_success,
            "seconds": round(n * self.timestep, 9),
            "steps": n,
            "error": self.error,
            "goals_total": len(goals),
            "goals_completed": len(completed),
            "goals_reached": int(sum(g["reached"] for g in goals)),
            "goal_distance_initial_mean": _mean([g["initial_distance"] for g in completed]),
            "goal_distance_final_mean": _mean([g["final_distance"] for g in completed]),
            "goal_distance_min_mean": _mean([g["min_distance"] for g in completed]),
            "reach_tolerance": self.spec.reach_tolerance,
            "falls": [{"time": round(t, 6), "body": b} for t, b in self.falls],
            "drops": [{"time": round(t, 6), "body": b} for t, b in self.drops],
            "fell": bool(self.falls),
            "support_bodies": list(self.spec.support_bodies),
            "support_contact_fraction": self.summary.support_contact_fraction(),
            "gdd": self.summary.gdd_statistics(),
            "wall_time_s": self.wall_time,
            "realtime_factor": (n * self.timestep / self.wall_time) if self.wall_time > 0 else None,
            "goals": goals,
            "series": {"time": clean(a["time"][idx]), "goal_distance": clean(a["goal_distance"][idx]),
                       "target_distance": clean(a["target_distance"][idx]),
                       "active": [int(x) for x in a["active"][idx]]},
        }
        return report


def _mean(values):
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def gdd_statistics(a: dict) -> dict:
    """Median (and 95th percentile) solver statistics of per-step arrays (see :class:`SessionResult`).

    ``a`` holds every step's ``(N,)`` arrays ``time``, ``status``, ``iterations``,
    ``dual_updates``, ``nefc``, ``physics_violation``, ``residual_gradient``, ``solve_time`` and
    ``step_time``.  Returns keys ``iterations_median/p95``, ``dual_updates_median/p95``,
    ``constraints_median/p95`` (rows of J), ``physics_violation_median/p95`` (m/s²),
    ``residual_gradient_median/p95`` (N), ``converged_fraction``, ``solve_us_median/mean``
    and ``step_us_median/mean`` (µs of wall time: one solve, one whole :func:`gdd_step`; the
    first step, which loads the compiled kernels, is left out); non-finite values are left out
    of the percentiles and means; empty for an empty session.  A session computes the same
    statistics while it runs (:class:`_SessionSummary`, exact up to :data:`STEP_RECORD_LIMIT`
    steps).
    """
    a = dict(a, active=np.full(a["time"].shape, -1), target_distance=np.full(a["time"].shape, np.nan))
    a.pop("support", None)
    return _SessionSummary.from_arrays(a, 0, 0.0).gdd_statistics()


# --------------------------------------------------------------------------- running


class _Recorder:
    """Recorded rows of a session: every step (``stride`` 1, all fields) or, for a bounded
    recording, every ``stride``-th step and only the series fields (not :data:`STEP_ONLY_FIELDS`).

    Buffers grow in chunks (doubling from at most ``_FIRST_CHUNK`` rows) as the session runs: a
    long session costs memory for the rows recorded, not an up-front allocation for its whole
    length.  :meth:`row` gives (and makes room for) the row of step k.
    """

    _FIRST_CHUNK = 4096

    def __init__(self, model, n, n_mon, n_sup, stride: int = 1, every_field: bool = True):
        self.stride = int(stride)
        self.rows_max = -(-int(n) // self.stride)
        fields = _record_fields(model, n_mon, n_sup)
        if not every_field:
            fields = {k: v for k, v in fields.items() if k not in STEP_ONLY_FIELDS}
        self._fields = fields
        cap = min(self.rows_max, self._FIRST_CHUNK)
        self.a = {key: np.full((cap,) + shape, fill, dtype=dtype) for key, (shape, dtype, fill) in fields.items()}

    def row(self, k: int) -> int | None:
        """Row of step ``k`` (room made for it), or None when step k is not recorded."""
        if k % self.stride:
            return None
        r = k // self.stride
        self.reserve(r + 1)
        return r

    def reserve(self, rows):
        """Make room for ``rows`` rows (indices ``0 … rows-1``); the dict ``a`` is updated in place."""
        cap = len(self.a["time"])
        if rows <= cap:
            return
        cap = min(max(rows, 2 * cap), self.rows_max)
        for key, old in self.a.items():
            shape, dtype, fill = self._fields[key]
            new = np.full((cap,) + shape, fill, dtype=dtype)
            new[: len(old)] = old
            self.a[key] = new

    def trimmed(self, steps):
        """Copies of the rows of the first ``steps`` steps (``⌈steps / stride⌉`` rows)."""
        rows = -(-int(steps) // self.stride)
        return {key: v[:rows].copy() for key, v in self.a.items()}


def run_session(spec: ReachSpec, *, video=None, plot=None, progress: bool | None = None,
                model: mujoco.MjModel | None = None, extra_terms=(), width: int = 640,
                height: int = 480, fps: float = 30.0, record: str = "auto",
                series_rate: float = 20.0) -> SessionResult:
    """Run a scripted goal-directed session.

    Every step: activate/move/release the goals (:meth:`ReachSession.update_goals`),
    :func:`~contactopt.solvers.gdd.solver.gdd_step`, then check falls, drops and supports.  An
    error of the step (non-finite cost or state, a failed solve) stops the session
    *before* that step is taken — the simulation never steps with a non-finite control —
    and is reported in ``result.error``.

    What is kept: the falls, drops, per-drag goal distances and solver statistics see every
    step (:class:`SessionResult` ``summary``, bounded memory); ``record`` decides the arrays:

    * ``"steps"``: every field at every step (~1.35 kB per humanoid step; what datasets and
      replays need);
    * ``"series"``: the series fields only (not :data:`STEP_ONLY_FIELDS`) every
      ``max(1, round(1 / (series_rate · h)))`` steps (~100 B per humanoid row, 20 rows per simulated
      second by default: ~1.2 MB for 10 humanoid minutes) — for long sessions and soaks;
    * ``"auto"`` (default): ``"steps"`` for sessions of at most :data:`STEP_RECORD_LIMIT`
      steps, else ``"series"``.

    Args:
      spec: the :class:`ReachSpec`.
      video: optional ``.mp4`` path: the model's ``video`` camera (else a tracking camera),
        the active goal drawn as a red sphere, ``fps`` frames per simulated second
        (written atomically).
      plot: optional ``.png`` path for :func:`plot_session`.
      progress: progress bar (None: only on a terminal).
      model: an already loaded model for ``spec.model``.
      extra_terms: additional cost terms.
      width, height: video frame size in pixels (even).
      fps: video frames per simulated second.
      record: ``"auto"``, ``"steps"`` or ``"series"`` (above).
      series_rate: rows per simulated second (Hz) with ``record="series"`` (the report's rate).

    Returns:
      :class:`SessionResult`.

    Raises:
      ParameterError: bad spec (unknown frame, no actuators, ...), bad output paths, bad
        ``record`` / ``series_rate``.
      RenderError: a video was asked for and no OpenGL backend works.
    """
    from ...simulate import frame_stride

    if record not in _RECORD_MODES:
        raise ParameterError(f"record must be one of {', '.join(_RECORD_MODES)}, got {record!r}")
    if not (isinstance(series_rate, (int, float)) and math.isfinite(series_rate) and series_rate > 0):
        raise ParameterError(f"series_rate must be a positive number of Hz, got {series_rate!r}")
    for flag, path, suffix in (("video", video, ".mp4"), ("plot", plot, ".png")):
        if path is not None:
            from pathlib import Path

            p = Path(path)
            if p.suffix.lower() != suffix:
                raise ParameterError(f"{flag} path must end in {suffix}, got {p}")
            if not p.parent.exists():
                raise ParameterError(f"{flag}: directory {p.parent} does not exist")
    session = ReachSession(spec, model=model, extra_terms=extra_terms)
    m, d = session.model, session.data
    h = float(m.opt.timestep)
    n = int(round(spec.seconds / h))
    if n < 1:
        raise ParameterError(f"session of {spec.seconds:g} s is shorter than one step of {h:g} s")
    if record == "auto":
        record = "steps" if n <= STEP_RECORD_LIMIT else "series"
    every_step = record == "steps"
    monitored = session.fall_ids + session.drop_ids
    rec = _Recorder(m, n, len(monitored), len(session.support_ids),
                    stride=1 if every_step else frame_stride(h, series_rate), every_field=every_step)
    summary = _SessionSummary(len(spec.drags), len(session.support_ids), spec.reach_tolerance)
    falls, drops = [], []
    fallen_seen, dropped_seen = set(), set()
    origins = np.full((len(spec.drags), 3), np.nan)
    error = None
    stride = frame_stride(h, fps) if video is not None else 0
    frames = 0
    writer = renderer = None
    k = 0
    start = time.perf_counter()
    try:
        if video is not None:
            from ...render import VideoWriter

            writer = VideoWriter(video, fps=1.0 / (stride * h)).__enter__()
            renderer = _GoalRenderer(m, width, height)
        with progress_bar(total=n, desc=spec.name, unit="step", enable=progress) as bar:
            a = rec.a  # updated in place as the buffers grow
            for k in range(n):
                r = rec.row(k)
                if k:  # positions of the new state (mj_step2 leaves those of the previous one)
                    mujoco.mj_kinematics(m, d)
                session.update_goals()
                act = session.active
                if act >= 0 and not np.isfinite(origins[act, 0]):
                    origins[act] = session.origin
                if stride and k % stride == 0:
                    writer.append(renderer.render(d, session.goal if act >= 0 else None))
                    frames += 1
                t = float(d.time)
                target_distance = np.nan
                if act >= 0:
                    pos = session.frame_position(spec.drags[act].frame)
                    target_distance = float(np.linalg.norm(pos - session.target))
                if r is not None:
                    a["time"][r] = t
                    a["active"][r] = act
                    if every_step:
                        a["qpos"][r] = d.qpos
                        a["qvel"][r] = d.qvel
                        a["goal"][r] = session.goal
                        a["qref"][r] = session.qref
                    if act >= 0:
                        if every_step:
                            a["frame_pos"][r] = pos
                        a["goal_distance"][r] = np.linalg.norm(pos - session.goal)
                        a["target_distance"][r] = target_distance
                    if monitored:
                        a["heights"][r] = [d.xpos[i, 2] for _, i, _ in monitored]
                for b, i, hmin in session.fall_ids:
                    if d.xpos[i, 2] < hmin and b not in fallen_seen:
                        fallen_seen.add(b)
                        falls.append((t, b))
                for b, i, hmin in session.drop_ids:
                    if d.xpos[i, 2] < hmin and b not in dropped_seen:
                        dropped_seen.add(b)
                        drops.append((t, b))
                t0 = time.perf_counter()
                try:
                    res = gdd_step(m, d, session.cost, session.solver)
                except ContactoptError as exc:
                    error = f"t = {d.time:.4f} s: {exc}"
                    break
                step_time = time.perf_counter() - t0
                # contacts of mj_step1: those of the state before the step
                support = session.support_contacts() if session.support_ids else None
                summary.add_step(t, act, target_distance, res.status, res.iterations, res.dual_updates, res.nefc,
                                 res.physics_violation, res.residual_gradient, res.solve_time, step_time, support)
                if r is not None:
                    a["step_time"][r] = step_time
                    if every_step:
                        a["qacc"][r] = res.qacc
                        a["qacc_forward"][r] = res.qacc_forward
                        a["ctrl"][r] = d.ctrl
                        a["qfrc_actuator"][r] = d.qfrc_actuator
                    a["status"][r] = int(res.status)
                    a["iterations"][r] = res.iterations
                    a["dual_updates"][r] = res.dual_updates
                    a["factorizations"][r] = res.factorizations
                    a["nefc"][r] = res.nefc
                    a["ncon"][r] = res.ncon
                    a["physics_violation"][r] = res.physics_violation
                    a["residual_gradient"][r] = res.residual_gradient
                    a["solve_time"][r] = res.solve_time
                    if support is not None:
                        a["support"][r] = support
                bar.update(1)
            else:
                k = n
            if stride and error is None and n % stride == 0:
                mujoco.mj_forward(m, d)
                writer.append(renderer.render(d, None))
                frames += 1
    except BaseException as exc:
        if writer is not None:
            writer.__exit__(type(exc), exc, None)
            writer = None
        raise
    finally:
        if renderer is not None:
            renderer.close()
    if writer is not None:
        writer.__exit__(None, None, None)
    arrays = rec.trimmed(k)
    if not every_step:
        arrays = _SeriesArrays(arrays, rec.stride)
    result = SessionResult(spec=spec, model=model_name(m), timestep=h, arrays=arrays,
                           falls=falls, drops=drops, drag_origin=origins, error=error,
                           wall_time=time.perf_counter() - start, video_frames=frames, n_steps=k,
                           record=record, stride=rec.stride, summary=summary)
    if plot is not None:
        plot_session(result, plot)
    return result


# --------------------------------------------------------------------------- video and plots


def _goal_renderer_class():
    from ...render import OffscreenRenderer

    class GoalRenderer(OffscreenRenderer):
        """:class:`~contactopt.render.OffscreenRenderer` that also draws the goal as a red sphere."""

        def render(self, data, goal=None):  # noqa: D401 - same contract as the base class
            if goal is None or not np.all(np.isfinite(goal)):
                return super().render(data)
            self._gl.make_current()
            if self._track_body >= 0:
                self.camera.lookat[:] = data.subtree_com[self._track_body]
            mujoco.mjv_updateScene(self.model, data, self._option, None, self.camera,
                                   mujoco.mjtCatBit.mjCAT_ALL, self._scene)
            scn = self._scene
            if scn.ngeom < scn.maxgeom:
                radius = max(0.01, 0.012 * float(self.model.stat.extent))
                mujoco.mjv_initGeom(scn.geoms[scn.ngeom], int(mujoco.mjtGeom.mjGEOM_SPHERE),
                                    np.array([radius, 0.0, 0.0]), np.asarray(goal, dtype=float),
                                    np.eye(3).reshape(9), np.array([0.9, 0.1, 0.1, 0.8], dtype=np.float32))
                scn.ngeom += 1
            mujoco.mjr_render(self._viewport, scn, self._context)
            mujoco.mjr_readPixels(self._rgb, None, self._viewport, self._context)
            return np.flipud(self._rgb).copy()

    return GoalRenderer


def _GoalRenderer(model, width, height):
    return _goal_renderer_class()(model, width, height, camera="video")


def plot_session(result: SessionResult, path) -> None:
    """PNG of a session: goal distance, monitored heights and support contacts, GDD
    iterations and constraints, physics violation and residual gradient, µs per solve.

    Shaded spans mark the drags (goal held); the dashed line is ``reach_tolerance``.
    """
    from ...plots import new_figure, save_figure

    a = result.arrays
    t = a["time"]
    fig, axes = new_figure(5, row_height=2.1)
    spec = result.spec
    title = f"{spec.name}: goal-directed dynamics, h = {result.timestep * 1e3:g} ms"
    if result.falls:
        title += f" — FELL at {result.falls[0][0]:.2f} s"
    axes[0, 0].set_title(title)
    ax = axes[0, 0]
    ax.plot(t, a["goal_distance"], lw=1.2, label="to dragged goal")
    ax.plot(t, a["target_distance"], lw=1.2, label="to final goal")
    ax.axhline(spec.reach_tolerance, color="gray", lw=0.8, ls="--", label="tolerance")
    ax.set_ylabel("goal distance [m]")
    ax.legend(loc="upper right", fontsize=7)
    ax = axes[1, 0]
    names = [b for b, _ in spec.fall_heights] + [b for b, _ in spec.drop_heights]
    lims = [hh for _, hh in spec.fall_heights] + [hh for _, hh in spec.drop_heights]
    for j, (b, lim) in enumerate(zip(names, lims)):
        line, = ax.plot(t, a["heights"][:, j], lw=1.2, label=f"{b} height")
        ax.axhline(lim, color=line.get_color(), lw=0.8, ls=":")
    if a["support"].shape[1]:
        ax2 = ax.twinx()
        ax2.step(t, a["support"].sum(axis=1), where="post", color="tab:purple", lw=0.8,
                 label="supports on floor")
        ax2.set_ylabel("supports in contact", fontsize=8)
        ax2.set_ylim(-0.1, a["support"].shape[1] + 0.5)
    ax.set_ylabel("height [m]")
    if names:
        ax.legend(loc="lower left", fontsize=7)
    ax = axes[2, 0]
    ax.plot(t, a["iterations"], lw=0.8, label="iterations")
    ax.plot(t, a["dual_updates"], lw=0.8, label="dual updates")
    ax.plot(t, a["nefc"], lw=0.8, label="constraints")
    ax.set_ylabel("count")
    ax.legend(loc="upper right", fontsize=7)
    ax = axes[3, 0]
    ax.semilogy(t, np.maximum(a["physics_violation"], 1e-17), lw=0.8, label="physics violation [m/s²]")
    ax.semilogy(t, np.maximum(a["residual_gradient"], 1e-17), lw=0.8, label="residual gradient [N]")
    ax.set_ylabel("error (floor 1e-17)")
    ax.legend(loc="upper right", fontsize=7)
    ax = axes[4, 0]
    ax.plot(t[1:], 1e6 * a["solve_time"][1:], lw=0.6, label="GDD solve")
    ax.plot(t[1:], 1e6 * a["step_time"][1:], lw=0.6, label="whole step")
    finite = a["step_time"][1:][np.isfinite(a["step_time"][1:])]
    if finite.size:  # the first step (loading the compiled kernels) is not shown
        ax.set_ylim(0.0, 1.5e6 * float(np.percentile(finite, 99.5)))
    ax.set_ylabel("µs per step")
    every = (f", every {result.stride * result.timestep * 1e3:g} ms" if result.stride > 1 else "")
    ax.set_xlabel(f"time [s]  (shaded: goal held{every})")
    ax.legend(loc="upper right", fontsize=7)
    for row in axes[:, 0]:
        row.grid(alpha=0.3)
        for dr in spec.drags:
            row.axvspan(dr.start, min(dr.end, spec.seconds), color="tab:orange", alpha=0.08)
    save_figure(fig, path)
