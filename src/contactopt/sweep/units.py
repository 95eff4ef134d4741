"""Units of a sweep: one closed-loop run (task × planner × seed × grid point) and its row.

A :class:`Unit` names its task by *reference* (a bundled task name or a task file's absolute
path), never by a loaded :class:`~contactopt.task.Task` (tasks hold callables and models): the
worker loads the task itself (:func:`run_unit`).  A unit's :attr:`Unit.id` is a hash of
everything that decides its outcome (task reference, planner, seed, grid values, seconds, lag,
stop-on-success), so a re-run of a sweep recognises the units already in its output file.

The failure kinds of a run are defined here once (``fell`` / ``timeout`` / ``error: …``);
``bench tasks`` uses the same ones.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ContactoptError, ParameterError

__all__ = [
    "SweepPlan",
    "Unit",
    "crash_if_armed",
    "failure_kind",
    "is_task_file",
    "parse_grid",
    "plan_sweep",
    "run_mode",
    "run_unit",
    "update_ms",
]

#: Environment variable of the fault-injection hook used by the tests: a directory; when the file
#: ``arm`` exists in it, the first unit to create ``crashed`` there ends its worker process
#: (``os._exit(1)``) before running, as a worker killed mid-sweep would.
CRASH_ONCE_ENV = "CONTACTOPT_SWEEP_CRASH_ONCE"


# --------------------------------------------------------------------------- failure kinds


def failure_kind(report: dict) -> str | None:
    """The failure kind of a finished run's report: None (success), ``"fell"`` (the task's
    latched failure test fired) or ``"timeout"`` (the run ended without success)."""
    if report.get("success"):
        return None
    return "fell" if report.get("time_of_failure") is not None else "timeout"


def error_kind(exc: BaseException) -> str:
    """``"error: MESSAGE"`` for an exception raised by a run (the planner refused the task,
    or raised); exceptions outside contactopt's own carry their type name."""
    if isinstance(exc, ContactoptError):
        return f"error: {exc}"
    return f"error: {type(exc).__name__}: {exc}"


def update_ms(report: dict) -> float | None:
    """Median wall milliseconds of a planner update in ``report`` (the key differs by runner)."""
    for key in ("iteration_ms_median", "solve_ms_median", "update_ms_median"):
        if report.get(key) is not None:
            return float(report[key])
    return None


def run_mode(report: dict) -> str:
    """``sync measured lag``, ``sync fixed lag`` or ``async`` (the report's mode and lag)."""
    if report.get("mode") != "sync":
        return str(report.get("mode"))
    return "sync measured lag" if report.get("lag") in (None, "measured") else "sync fixed lag"


def is_task_file(text: str) -> bool:
    """True when ``text`` names a Python task file rather than a bundled task."""
    return text.endswith(".py") or os.sep in text or Path(text).is_file()


# --------------------------------------------------------------------------- units


@dataclass(frozen=True)
class Unit:
    """One closed-loop run of a sweep.

    Attributes:
      task: bundled task name, or a task file's absolute path.
      kind: ``"file"`` (a task file), ``"task"`` (a bundled task's planner-independent form) or
        ``"runner"`` (a bundled task's own runner: no grid, no trajectory).
      planner: registered planner name.
      seed: seed of the initial state.
      grid: ``((key, value), ...)`` ``--set`` keys of this grid point, values typed (float, int,
        bool, str) as the planner's options parse them; axis order.
      seconds: simulated seconds (None: the task's duration).
      lag: fixed sync-mode policy lag in simulated seconds (None: measured).
      stop_on_success: end the run once the success test has held.
      trajectories: directory for ``ID.npz`` (the npz of ``run --save-trajectory``), or None.
      index: position in the sweep (output order); not part of the id.
    """

    task: str
    kind: str
    planner: str
    seed: int
    grid: tuple = ()
    seconds: float | None = None
    lag: float | None = None
    stop_on_success: bool = False
    trajectories: str | None = field(default=None, compare=False)
    index: int = field(default=0, compare=False)

    @property
    def id(self) -> str:
        """16 hex digits: a hash of everything that decides the run's outcome."""
        key = {"task": self.task, "planner": self.planner, "seed": self.seed,
               "grid": sorted([k, v] for k, v in self.grid), "seconds": self.seconds, "lag": self.lag,
               "stop_on_success": self.stop_on_success}
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]

    def describe(self) -> dict:
        """The row's identifying fields: ``id``, ``task``, ``planner``, ``seed``, ``grid``
        (key → value), ``seconds``, ``lag``."""
        return {"id": self.id, "task": self.task, "planner": self.planner, "seed": self.seed,
                "grid": dict(self.grid), "seconds": self.seconds, "lag": self.lag}


@dataclass(frozen=True)
class SweepPlan:
    """A checked sweep: its units in output order and the grid axes.

    Attributes:
      units: the :class:`Unit` s, grid point major, seed minor.
      axes: ``((key, (v1, v2, ...)), ...)`` typed grid values per axis, in the order given.
      task, planner: the task reference and planner of every unit.
    """

    units: tuple
    axes: tuple
    task: str
    planner: str


def parse_grid(items) -> list[tuple[str, list[str]]]:
    """``["KEY=V1,V2", ...]`` → ``[(KEY, [V1, V2]), ...]`` (strings; typed by :func:`plan_sweep`).

    Raises:
      ParameterError: not ``KEY=V1[,V2...]``, an empty value, a key given twice, a value
        repeated within a key.
    """
    out: list[tuple[str, list[str]]] = []
    for text in items or ():
        key, sep, values = str(text).partition("=")
        key = key.strip()
        vals = [v.strip() for v in values.split(",")]
        if not sep or not key or not values.strip() or any(v == "" for v in vals):
            raise ParameterError(f"--grid {text!r}: expected KEY=V1,V2,... (the --set keys of run)")
        if key in (k for k, _ in out):
            raise ParameterError(f"--grid {key}: given twice (put all its values in one --grid)")
        if len(set(vals)) != len(vals):
            raise ParameterError(f"--grid {text!r}: a value is repeated")
        out.append((key, vals))
    return out


def _typed_value(planner: str, task, key: str, value: str, model):
    """``value`` of the ``--set`` key ``key`` as the planner parses it (unknown key or wrong type:
    :class:`ParameterError` from :func:`contactopt.mpc.registry.parse_settings`)."""
    from ..mpc import registry

    try:
        options, weights = registry.parse_settings(planner, task, {key: value}, model=model)
    except ParameterError as exc:  # the registry names the flag of run
        raise ParameterError(str(exc).replace("--set ", "--grid ", 1)) from None
    typed = weights[key] if key in weights else options[key]
    try:
        json.dumps(typed)
    except TypeError:
        typed = str(value)
    return typed


def plan_sweep(task_ref: str, *, planner: str | None = None, seeds: range, grid=(), seconds: float | None = None,
               lag: float | None = None, stop_on_success: bool = False, trajectories=None) -> SweepPlan:
    """Check a sweep and list its units (loads the task once here to check the grid keys).

    Args:
      task_ref: a bundled task name or a task file.
      planner: registered planner (default: a task file's
        :attr:`~contactopt.task.Task.default_planner`, else the bundled task's first).
      seeds: non-empty range of seeds.
      grid: ``[(KEY, [V1, ...]), ...]`` (:func:`parse_grid`); keys are the ``--set`` keys of ``run``.
      seconds: simulated seconds per run (> 0; None: the task's).
      lag: fixed sync-mode lag in seconds (>= 0; None: measured).
      stop_on_success: end each run once its success test has held.
      trajectories: an existing directory for each run's npz, or None.

    Returns:
      :class:`SweepPlan`.

    Raises:
      ParameterError: an unknown task, planner or grid key (the message lists the valid ones), a
        value of the wrong type, an empty seed range, a bad number, a missing directory, or a grid
        or trajectory on a bundled task with fixed settings.
    """
    from ..mpc import registry
    from ..mpc.task_runner import check_seed

    seeds = range(seeds.start, seeds.stop) if isinstance(seeds, range) else seeds
    if not isinstance(seeds, range) or len(seeds) == 0:
        raise ParameterError(f"--seeds: expected a non-empty range A:B, got {seeds!r}")
    check_seed(seeds.start)
    check_seed(seeds.stop - 1)
    if seconds is not None and not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise ParameterError(f"--seconds must be a positive finite number, got {seconds!r}")
    if lag is not None and not (isinstance(lag, (int, float)) and math.isfinite(lag) and lag >= 0):
        raise ParameterError(f"--lag must be a number of seconds >= 0, got {lag!r}")
    if trajectories is not None and not Path(trajectories).is_dir():
        raise ParameterError(f"--save-trajectories: directory {trajectories} does not exist")
    grid = list(grid or ())
    task = None
    if is_task_file(task_ref):
        path = Path(task_ref)
        if not path.is_file():
            raise ParameterError(f"no task file {task_ref}")
        from ..task import load_task_file

        task = load_task_file(str(path))
        ref, kind, planner = str(path.resolve()), "file", planner or task.default_planner
    else:
        from ..tasks import load_task

        spec = load_task(task_ref)  # an unknown name lists the tasks
        planner = planner or spec.planners[0]
        generic = spec.task_factory is not None and (planner not in spec.runners or grid or trajectories)
        if generic:
            task, kind = spec.task(), "task"
        else:
            if grid:
                raise ParameterError(f"--grid applies to task files and to tasks with a planner-independent form; "
                                     f"{task_ref!r} has fixed settings")
            if trajectories is not None:
                raise ParameterError(f"--save-trajectories applies to task files and to tasks with a "
                                     f"planner-independent form; {task_ref!r} has none")
            runner = spec.runner(planner)  # an unknown planner lists the task's ones
            if lag is not None and "lag" not in inspect.signature(runner).parameters:
                raise ParameterError(f"--lag: the {planner} runs of {task_ref} model no lag")
            kind = "runner"
        ref = task_ref
    axes = []
    if task is not None:
        registry.spec(planner)  # an unknown planner lists the valid ones
        model = task.load_plant()
        for key, values in grid:
            typed = [_typed_value(planner, task, key, v, model) for v in values]
            if len(set(map(json.dumps, typed))) != len(typed):
                raise ParameterError(f"--grid {key}: two values parse to the same setting ({values})")
            axes.append((key, tuple(typed)))
    units = []
    points = itertools.product(*[[(k, v) for v in vals] for k, vals in axes]) if axes else [()]
    for point in points:
        for seed in seeds:
            units.append(Unit(ref, kind, planner, int(seed), tuple(point), None if seconds is None else float(seconds),
                              None if lag is None else float(lag), bool(stop_on_success),
                              None if trajectories is None else str(Path(trajectories).resolve()), len(units)))
    return SweepPlan(tuple(units), tuple(axes), ref, planner)


# --------------------------------------------------------------------------- running one unit


def crash_if_armed() -> None:
    """The fault-injection hook of :data:`CRASH_ONCE_ENV` (tests: a worker killed mid-sweep)."""
    folder = os.environ.get(CRASH_ONCE_ENV)
    if not folder or not os.path.exists(os.path.join(folder, "arm")):
        return
    try:
        fd = os.open(os.path.join(folder, "crashed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, f"{socket.gethostname()}:{os.getpid()}\n".encode())
    os.close(fd)
    os._exit(1)


def _execute(unit: Unit):
    """``(report, TaskRun | None)`` of one unit (loads the task here, in the worker)."""
    if unit.kind == "runner":
        from ..tasks import load_task

        runner = load_task(unit.task).runner(unit.planner)
        options = {} if unit.lag is None else {"lag": unit.lag}
        return runner(seconds=unit.seconds, seed=unit.seed, **options), None
    from ..mpc.task_runner import run_task

    if unit.kind == "file":
        from ..task import load_task_file

        task = load_task_file(unit.task)
    else:
        from ..tasks import load_task

        task = load_task(unit.task).task()
    run = run_task(task, unit.planner, seed=unit.seed, seconds=unit.seconds, lag=unit.lag,
                   settings=dict(unit.grid), stop_on_success=unit.stop_on_success)
    return run.report, run


def run_unit(unit: Unit) -> dict:
    """Run one unit closed loop and return its row (never raises for a failed or raising run).

    Returns:
      ``{id, task, planner, seed, grid, seconds, lag, success (bool), time_to_success (simulated
      s or None), metric (the task's metric at the end, or its running cost), update_ms_median
      (wall ms), policy_lag_ms (simulated ms), mode, failure (None, "fell", "timeout" or
      "error: …"), wall_s (wall seconds of the run in the worker), cpu_s (CPU seconds of the
      worker process meanwhile, all its threads), trajectory (file name or
      None)}``.
    """
    crash_if_armed()
    row = unit.describe()
    t0, c0 = time.perf_counter(), time.process_time()
    report: dict = {}
    trajectory = None
    try:
        report, run = _execute(unit)
        failure = failure_kind(report)
        if unit.trajectories is not None and run is not None:
            from ..mpc.task_runner import save_trajectory

            trajectory = f"{unit.id}.npz"
            save_trajectory(run, Path(unit.trajectories) / trajectory)
    except Exception as exc:  # noqa: BLE001 - a run that raises is a row with its error, never a crashed sweep
        failure = error_kind(exc)
    lag = report.get("policy_lag_ms")
    row.update({
        "success": bool(report.get("success", False)) and failure is None,
        "time_to_success": report.get("time_to_success"),
        "metric": report.get("final_cost"),
        "update_ms_median": update_ms(report),
        "policy_lag_ms": None if lag is None else float(lag),
        "mode": run_mode(report) if report.get("mode") else None,
        "failure": failure,
        "wall_s": round(time.perf_counter() - t0, 4),
        "cpu_s": round(time.process_time() - c0, 4),
        "trajectory": trajectory,
    })
    return row
