"""``contactopt bench robustness``: success rate against the plant's model error (iLQG paper, §V).

The iLQG paper plans with one model and applies the controls to another to study model error.
Here every selected task × planner pair (:func:`contactopt.bench.tasks_bench.pairs`) runs closed
loop over a seed range while one parameter of the *plant* departs from the nominal model the
planner keeps:

* ``mass_scale`` — every body's mass and inertia × s (0.7 … 1.3);
* ``friction_scale`` — every geom's friction × s (0.5 … 1.5);
* ``gain_scale`` — every actuator's force × s (0.8 … 1.2);
* ``latency`` — seconds (0 … 40 ms) between each plan and its application that the planner is
  not told about (:attr:`~contactopt.mpc.MPCSettings.added_latency`; sync mode).

With ``deterministic`` (``bench robustness --deterministic``) a pair that measures its policy
lag runs with the fixed lag calibrated once on this machine instead
(:mod:`contactopt.mpc.calibration`, as ``bench tasks --deterministic``), so its rates do not depend
on the machine's load; the latency parameter then adds to that fixed lag.

The nominal run (all scales 1, no latency) is run once per seed and shared by the four
parameters.  Each run is one unit on the sweep engine (``bench --workers N``: a process pool),
like ``bench tasks``; a run is a success when the task's success test held (the failure kinds
are ``bench tasks``' ones).

``breaks``: for each pair and parameter, the nearest values below and above nominal whose
success rate falls under :data:`BREAK_RATE` × the pair's nominal rate (None: it held over the
whole range), which is what the README's "where each planner breaks" reads from.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ContactoptError, ParameterError
from ..progress import progress_bar
from ..sweep.units import error_kind, failure_kind, run_mode
from . import Benchmark, format_table, register_benchmark

__all__ = ["DEFAULT_TASKS", "GRID", "NOMINAL", "BREAK_RATE", "RobustnessUnit", "run_robustness_unit",
           "breaks", "run", "table", "plot_robustness"]

#: tasks of the default run (issue 24: humanoid-push, a hopper, the quadruped, hand-ball), each
#: with every planner that runs it
DEFAULT_TASKS = ("humanoid-push", "hopper", "hopper-hop", "quadruped", "hand-ball")
#: the values of each plant parameter (each grid holds the nominal value)
GRID = {
    "mass_scale": (0.7, 0.85, 1.0, 1.15, 1.3),
    "friction_scale": (0.5, 0.75, 1.0, 1.25, 1.5),
    "gain_scale": (0.8, 0.9, 1.0, 1.1, 1.2),
    "latency": (0.0, 0.01, 0.02, 0.04),
}
NOMINAL = {"mass_scale": 1.0, "friction_scale": 1.0, "gain_scale": 1.0, "latency": 0.0}
#: a success rate below this fraction of the pair's nominal rate marks where it breaks
BREAK_RATE = 0.5


@dataclass(frozen=True)
class RobustnessUnit:
    """One closed-loop run of the benchmark: ``task`` × ``planner`` at ``seed`` with the plant's
    ``parameter`` set to ``value`` (``parameter`` None: the nominal plant)."""

    task: str
    planner: str
    seed: int
    parameter: str | None
    value: float
    deterministic: bool = False
    calibration_seed: int = 0


def _runner(task_name: str, planner: str, *, deterministic: bool = False, calibration_seed: int = 0):
    """``(seed, **errors) -> report`` of one pair: the task's bundled runner for ``planner`` (which
    takes the model-error keywords), or its planner-independent form through ``run_task``.  With
    ``deterministic`` a measured lag is replaced by the pair's calibrated fixed lag (calibrated on a
    run of ``calibration_seed``, cached per machine)."""
    import inspect

    from ..mpc.calibration import runner_fixed_lag, task_fixed_lag
    from ..mpc.task_runner import run_task
    from .tasks_bench import resolve_pair

    runner, task = resolve_pair(task_name, planner)
    if runner is not None:
        accepted = inspect.signature(runner).parameters
        missing = [k for k in NOMINAL if k not in accepted]
        if missing:
            raise ParameterError(f"the {planner} runs of {task_name} take no plant model error "
                                 f"({', '.join(missing)})")
        options: dict = {}
        if deterministic:
            runner_fixed_lag(task_name, planner, runner, options, calibration_seed)
        return lambda seed, **errors: runner(seed=seed, stop_on_success=True, **options, **errors)
    lag = None
    if deterministic:
        lag, _ = task_fixed_lag(task, planner, calibration_seed)
    return lambda seed, **errors: run_task(task, planner, seed=seed, lag=lag, stop_on_success=True,
                                           **errors).report


_RUNNERS: dict = {}


def run_robustness_unit(unit: RobustnessUnit) -> dict:
    """Run one unit (here or in a worker): ``{"kind": None | "fell" | "timeout" | "error: …",
    "mode": the run's lag mode (:func:`~contactopt.sweep.units.run_mode`) or None, "wall_s"}``
    (``kind`` None = success)."""
    t0 = time.perf_counter()
    key = (unit.task, unit.planner, unit.deterministic, unit.calibration_seed)
    try:
        if key not in _RUNNERS:
            _RUNNERS[key] = _runner(unit.task, unit.planner, deterministic=unit.deterministic,
                                    calibration_seed=unit.calibration_seed)
        errors = {} if unit.parameter is None else {unit.parameter: unit.value}
        report = _RUNNERS[key](unit.seed, **errors)
        kind, mode = failure_kind(report), run_mode(report)
    except ContactoptError as exc:
        kind, mode = error_kind(exc), None
    return {"kind": kind, "mode": mode, "wall_s": time.perf_counter() - t0}


def breaks(rows: list[dict], threshold: float = BREAK_RATE) -> list[dict]:
    """Where each pair breaks: per (task, planner, parameter), ``low`` = the largest value below
    nominal and ``high`` = the smallest value above it with ``success_rate < threshold ×
    nominal_rate`` (None where the rate held; a pair that never succeeds nominally never breaks),
    and ``nominal_rate``.

    Args:
      rows: the benchmark's rows (``task``, ``planner``, ``parameter``, ``value``, ``success_rate``).
    """
    out = []
    keys = list(dict.fromkeys((r["task"], r["planner"], r["parameter"]) for r in rows))
    for task, planner, parameter in keys:
        mine = sorted((r for r in rows if (r["task"], r["planner"], r["parameter"]) == (task, planner, parameter)),
                      key=lambda r: r["value"])
        nominal = NOMINAL[parameter]
        nominal_rate = next((r["success_rate"] for r in mine if r["value"] == nominal), None)
        bar = threshold * (nominal_rate or 0.0)
        below = [r["value"] for r in mine if r["value"] < nominal and r["success_rate"] < bar]
        above = [r["value"] for r in mine if r["value"] > nominal and r["success_rate"] < bar]
        out.append({"task": task, "planner": planner, "parameter": parameter, "nominal_rate": nominal_rate,
                    "low": max(below) if below else None, "high": min(above) if above else None})
    return out


def _grid(parameters) -> dict:
    if parameters is None:
        return dict(GRID)
    unknown = set(parameters) - set(GRID)
    if unknown:
        raise ParameterError(f"unknown robustness parameter(s) {', '.join(sorted(unknown))} "
                             f"(parameters: {', '.join(GRID)})")
    return {p: GRID[p] for p in parameters}


def run(models=None, *, min_time: float = 0.2, progress: bool | None = None, seeds="0:4", tasks=None,
        planner: str | None = None, plots=None, parameters=None, workers: int | None = None,
        deterministic: bool = False) -> dict:
    """Success rate of each task × planner pair against each plant parameter's values.

    Args:
      models: unused (tasks are chosen with ``tasks``).
      min_time: unused.
      seeds: ``"A:B"``, a count ``N`` (= ``0:N``) or a ``range``: the runs of every grid point.
      tasks: bundled task names and/or task files (default :data:`DEFAULT_TASKS`), each with every
        planner that runs it (or ``planner`` only).
      plots: optional existing directory for ``robustness_<task>.png`` (success rate against each
        parameter, one line per planner).
      parameters: subset of :data:`GRID`'s keys (default all four).
      workers: worker processes of the sweep engine (default 1, or ``bench --workers``).
      deterministic: pairs that measure their lag run at the fixed lag calibrated once on this
        machine (calibrated here, before the runs start, from the first seed).

    Returns:
      ``{"rows": [{"task", "planner", "parameter", "value", "success_rate", "successes", "seeds",
      "failures", "mode"}, ...], "breaks": :func:`breaks`, "grid", "deterministic",
      "loadavg_1min": {"start", "end"}, "cpu_count", "wall_s", "plots": [paths]}``; each
      parameter's rows include the nominal value (the same runs for every parameter); ``mode`` is
      the pair's lag mode (:func:`contactopt.sweep.units.run_mode` of its nominal runs).
    """
    from . import tasks_bench
    from ..sweep.engines import Lost, make_engine

    if models:
        raise ParameterError("bench robustness chooses tasks with --tasks, not --model")
    seeds = tasks_bench.parse_seed_range(seeds)
    grid = _grid(parameters)
    if plots is not None and not Path(plots).is_dir():
        raise ParameterError(f"--plots: {plots} is not an existing directory")
    todo = tasks_bench.pairs(list(tasks) if tasks else list(DEFAULT_TASKS), planner)
    workers = tasks_bench._WORKERS if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ParameterError(f"--workers must be an integer >= 1, got {workers!r}")
    settings = [(None, 0.0)] + [(p, v) for p, values in grid.items() for v in values if v != NOMINAL[p]]
    units = [RobustnessUnit(t, p, s, param, float(v), bool(deterministic), seeds.start)
             for t, p in todo for param, v in settings for s in seeds]
    outcomes: dict = {}
    modes: dict = {}
    load_start = tasks_bench._loadavg()
    t0 = time.perf_counter()
    if deterministic:  # calibrate (and cache) every pair's lag here, one at a time, before the workers start
        for t, p in todo:
            try:
                _runner(t, p, deterministic=True, calibration_seed=seeds.start)
            except ContactoptError:
                pass  # the pair's units report the error
    with progress_bar(total=len(units), desc="bench robustness", unit="run", enable=progress, piped_lines=True) as bar, \
            make_engine(workers, inline=workers == 1) as engine:
        try:
            for unit, value, _ in engine.imap_unordered(run_robustness_unit, units):
                if isinstance(value, Lost):
                    value = {"kind": f"error: worker lost: {value.message}", "wall_s": 0.0}
                outcomes.setdefault((unit.task, unit.planner, unit.parameter, unit.value), []).append(value["kind"])
                if unit.parameter is None and value.get("mode"):
                    modes[(unit.task, unit.planner)] = value["mode"]
                bar.update(1)
        finally:
            _RUNNERS.clear()
    rows = []
    for t, p in todo:
        for param, values in grid.items():
            for v in values:
                kinds = outcomes.get((t, p, None, 0.0) if v == NOMINAL[param] else (t, p, param, float(v)), [])
                fails: dict = {}
                for k in kinds:
                    if k is not None:
                        fails[k] = fails.get(k, 0) + 1
                ok = sum(k is None for k in kinds)
                rows.append({"task": t, "planner": p, "parameter": param, "value": float(v),
                             "success_rate": ok / len(seeds), "successes": ok,
                             "seeds": f"{seeds.start}:{seeds.stop}", "failures": fails,
                             "mode": modes.get((t, p))})
    result = {"rows": rows, "breaks": breaks(rows), "grid": {k: list(v) for k, v in grid.items()},
              "deterministic": bool(deterministic),
              "loadavg_1min": {"start": load_start, "end": tasks_bench._loadavg()},
              "cpu_count": os.cpu_count(), "workers": workers, "wall_s": round(time.perf_counter() - t0, 1),
              "plots": []}
    if plots is not None:
        for name in dict.fromkeys(t for t, _ in todo):
            path = Path(plots) / f"robustness_{Path(name).stem if name.endswith('.py') else name}.png"
            plot_robustness(name, [r for r in rows if r["task"] == name], path)
            result["plots"].append(str(path))
    return result


_LABELS = {"mass_scale": "plant mass × s", "friction_scale": "plant friction × s",
           "gain_scale": "plant actuator force × s", "latency": "unmodelled latency [ms]"}


def plot_robustness(task_name: str, rows: list[dict], path) -> None:
    """One task's robustness figure: a panel per parameter, success rate against its value, one
    line per planner (the nominal value marked).  ``path``: PNG, written atomically."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..plots import save_figure

    params = list(dict.fromkeys(r["parameter"] for r in rows))
    fig = Figure(figsize=(8.0, 2.3 * len(params)), constrained_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(params), 1, squeeze=False)[:, 0]
    for ax, param in zip(axes, params):
        scale = 1e3 if param == "latency" else 1.0
        for planner in dict.fromkeys(r["planner"] for r in rows):
            mine = sorted((r for r in rows if r["parameter"] == param and r["planner"] == planner),
                          key=lambda r: r["value"])
            ax.plot([r["value"] * scale for r in mine], [r["success_rate"] for r in mine], "o-", lw=1.5,
                    label=planner)
        ax.axvline(NOMINAL[param] * scale, color="0.6", lw=1, ls="--")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel(_LABELS[param])
        ax.set_ylabel("success rate")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
    seeds = rows[0]["seeds"] if rows else "?"
    axes[0].set_title(f"{task_name}: success against plant model error (seeds {seeds})")
    save_figure(fig, path)


def table(result: dict) -> str:
    """The success rates as one row per pair and parameter, then where each pair breaks."""
    lines = []
    keys = list(dict.fromkeys((r["task"], r["planner"], r["parameter"]) for r in result["rows"]))
    rows = []
    for task, planner, param in keys:
        mine = sorted((r for r in result["rows"] if (r["task"], r["planner"], r["parameter"]) == (task, planner, param)),
                      key=lambda r: r["value"])
        n = len(range(*map(int, mine[0]["seeds"].split(":")))) if mine else 0
        scale, unit = (1e3, " ms") if param == "latency" else (1.0, "")
        rates = "  ".join(f"{r['value'] * scale:g}{unit}: {r['successes']}/{n}" for r in mine)
        mode = next((r.get("mode") for r in mine if r.get("mode")), None) or "?"
        rows.append({"task": task, "planner": planner, "mode": mode, "parameter": param, "rates": rates})
    lines.append(format_table(rows, [("task", "task", "{}"), ("planner", "planner", "{}"), ("mode", "mode", "{}"),
                                     ("parameter", "parameter", "{}"), ("rates", "successes at each value", "{}")]))
    brk = []
    for b in result["breaks"]:
        scale = 1e3 if b["parameter"] == "latency" else 1.0
        fmt = (lambda v: "held" if v is None else f"{v * scale:g}")
        brk.append({**b, "lo": fmt(b["low"]), "hi": fmt(b["high"])})
    lines.append(f"\nwhere each pair breaks (success rate < {BREAK_RATE:g} × its nominal rate; latency in ms):")
    lines.append(format_table(brk, [("task", "task", "{}"), ("planner", "planner", "{}"),
                                    ("parameter", "parameter", "{}"), ("nominal_rate", "nominal rate", "{:.2f}"),
                                    ("lo", "below nominal", "{}"), ("hi", "above nominal", "{}")]))
    la = result.get("loadavg_1min") or {}
    lines.append(f"{result['cpu_count']} cores, {result['workers']} worker(s), {result['wall_s']} s; 1-min load "
                 f"average {la.get('start')} at start, {la.get('end')} at end")
    lines += [f"plot {p}" for p in result.get("plots", [])]
    return "\n".join(lines)


register_benchmark(Benchmark(
    name="robustness",
    description="success rate against plant mass, friction, actuator gain and unmodelled latency "
                "(--tasks, --planner, --seeds A:B, --plots)",
    run=run,
    table=table,
    options=("seeds", "plots", "tasks", "planner", "workers", "deterministic"),
))
