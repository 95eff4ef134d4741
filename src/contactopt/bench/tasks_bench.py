"""``contactopt bench tasks``: success rates of every task × planner pair over a seed range.

Each pair runs closed loop once per seed, at the task's own defaults (duration, target
slowdown, lag mode, planner settings) — the runs ``contactopt run TASK --planner P --seed S``
makes.  A row reports:

* ``successes`` / ``success_rate`` over ``seeds`` (``"A:B"``, Python's half-open range);
* ``time_to_success_median``: median simulated seconds until the success test had held;
* ``update_ms_median``: median wall milliseconds of a planner update (over all runs);
* ``failures``: the runs that did not succeed, by kind — ``fell`` (the task's latched failure
  test fired), ``timeout`` (the run ended without success) or ``error: …`` (the planner refused
  the task or raised, with its message);
* ``failed_seeds``: the seeds of those runs, by the same kinds (``contactopt run TASK --planner P
  --seed S`` reruns one; exactly so where the lag was fixed);
* ``mode``: ``sync measured lag``, ``sync fixed lag`` or ``async`` (the runs' mode).

``--async`` runs every pair asynchronously in real time (planner and plant in their own threads,
the plant paced at the task's target slowdown, the policy lag whatever the planner takes): the
rate a researcher sees on this machine, not a reproducible one.  An async run uses both threads
at once, so ``--workers`` above 1 makes the runs compete for the cores.

Each run (pair × seed) is one unit of the sweep engine (:mod:`contactopt.sweep.engines`):
serially in this process by default, on ``--workers N`` single-threaded processes otherwise.

``--load`` keeps one core busy with a spinning process for the whole run (the condition of a
researcher's machine doing something else); the JSON says which load each rate was measured
under.  Task files (``--tasks path/to/task.py``) run with the generic planners (``ilqg``, ``idto``,
``gdd`` or ``--planner``) through :func:`contactopt.mpc.task_runner.run_task`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ContactoptError, ParameterError
from ..progress import progress_bar
from ..sweep.units import failure_kind, run_mode, update_ms
from . import Benchmark, format_table, register_benchmark

__all__ = [
    "BenchUnit",
    "busy_core",
    "pairs",
    "parse_seed_range",
    "run",
    "run_bench_unit",
    "run_pair",
    "table",
    "using_workers",
]

#: Planners a task file is checked with when ``--planner`` is not given.
FILE_PLANNERS = ("ilqg", "idto", "gdd")


def parse_seed_range(text) -> range:
    """``"A:B"`` → ``range(A, B)``; ``"N"`` or an int ``N`` → ``range(0, N)``.

    Raises:
      ParameterError: not of that form, negative, or empty.
    """
    if isinstance(text, range):
        seeds = text
    else:
        text = str(text).strip()
        try:
            if ":" in text:
                a, b = text.split(":")
                seeds = range(int(a), int(b))
            else:
                seeds = range(int(text))
        except ValueError:
            raise ParameterError(f"--seeds {text!r}: expected N or A:B (e.g. 0:32)") from None
    if seeds.start < 0 or len(seeds) == 0 or seeds.step != 1:
        raise ParameterError(f"--seeds {text!r}: expected a non-empty range of seeds >= 0 (e.g. 0:32)")
    return seeds


def _spin(parent: int) -> None:  # pragma: no cover - runs in the load process
    n = 0
    while True:
        n += 1
        if n == 5_000_000:  # about every 0.2 s: a bench killed by a signal cannot stop us, so look
            n = 0
            if os.getppid() != parent:
                return


@contextlib.contextmanager
def busy_core(enable: bool = True):
    """Keep one CPU core busy (a spinning child process) while the block runs; yields the process
    (None when not ``enable``).  The spinner also stops by itself when the bench process is gone
    (killed by a signal, so that no ``finally`` ran)."""
    if not enable:
        yield None
        return
    proc = multiprocessing.get_context("spawn").Process(target=_spin, args=(os.getpid(),), daemon=True)
    proc.start()
    try:
        yield proc
    finally:
        proc.terminate()
        proc.join(5.0)


#: ``task:NAME`` in a task list: the bundled task's planner-independent form, run by the generic
#: planners even where the task has its own runner for that planner
TASK_FORM_PREFIX = "task:"


def pairs(tasks=None, planner: str | None = None) -> list[tuple[str, str]]:
    """The ``(task, planner)`` pairs to run: each bundled task (or task file, or ``task:NAME``: a
    bundled task's planner-independent form) in ``tasks`` (all bundled tasks by default) with each
    planner it is checked with (a file or form: :data:`FILE_PLANNERS`), or only ``planner``."""
    from ..mpc import registry
    from ..tasks import available_tasks, load_task

    if planner is not None:
        registry.spec(planner)  # unknown names list the valid ones
    names = sorted(available_tasks()) if not tasks else list(tasks)
    out = []
    for name in names:
        if name.startswith(TASK_FORM_PREFIX):
            bundled = name[len(TASK_FORM_PREFIX):]
            if load_task(bundled).task_factory is None:
                forms = sorted(n for n, s in available_tasks().items() if s.task_factory is not None)
                raise ParameterError(f"--tasks {name}: task {bundled!r} has no planner-independent form "
                                     f"(tasks that have one: {', '.join(forms)})")
            out += [(name, p) for p in ((planner,) if planner else FILE_PLANNERS)]
            continue
        if name.endswith(".py") or os.sep in name:
            if not Path(name).is_file():
                raise ParameterError(f"--tasks: no task file {name}")
            out += [(name, p) for p in ((planner,) if planner else FILE_PLANNERS)]
            continue
        spec = load_task(name)  # an unknown name lists the tasks
        if planner is None:
            out += [(name, p) for p in spec.planners]
        elif planner in spec.planners or spec.task_factory is not None:
            out.append((name, planner))
        else:
            raise ParameterError(f"task {name!r} has no form planner {planner!r} can run "
                                 f"(its planners: {', '.join(spec.planners)})")
    return out


def resolve_pair(name: str, planner: str):
    """``(runner, task)`` of one task × planner pair: the bundled task's own runner for
    ``planner`` (``task`` None) when it has one, else ``(None, task)`` with the planner-independent
    :class:`~contactopt.task.Task` (a task file's ``TASK``, or the bundled task's form; always the
    form for ``task:NAME``)."""
    from ..tasks import load_task

    if name.startswith(TASK_FORM_PREFIX):
        return None, load_task(name[len(TASK_FORM_PREFIX):]).task()
    if name.endswith(".py") or os.sep in name:
        from ..task import load_task_file

        return None, load_task_file(name)
    spec = load_task(name)
    if planner in spec.runners:
        return spec.runner(planner), None
    return None, spec.task()


def _takes(runner, option: str) -> bool:
    """True when the bundled ``runner`` names the keyword ``option`` in its signature."""
    import inspect

    return option in inspect.signature(runner).parameters


def _runner(name: str, planner: str, *, deterministic: bool = False, seed: int = 0, lag: float | None = None,
            asynchronous: bool = False):
    """``(seed) -> report`` for one pair (a bundled runner, or the generic path).  With
    ``deterministic`` a measured lag is replaced by the pair's calibrated fixed lag
    (:mod:`contactopt.mpc.calibration`, calibrated from ``seed``); ``lag`` (s) fixes it for every
    pair; ``asynchronous`` runs in ``mode="async"`` (real time at the task's target slowdown).
    Generic runs stop once the success test has held (the outcome is the same: a failure is
    latched and no success can start after it)."""
    from ..mpc.calibration import runner_fixed_lag, task_fixed_lag
    from ..mpc.task_runner import run_task

    runner, task = resolve_pair(name, planner)
    if runner is not None and asynchronous and not _takes(runner, "mode"):
        # a scripted runner with no async mode (the GDD reaching sessions): its task form runs instead
        from ..tasks import load_task

        task = load_task(name).task()
        if task is None:
            raise ParameterError(f"--async: the {planner} runs of {name} have no asynchronous mode")
        runner = None
    if runner is not None:
        options: dict = {"mode": "async"} if asynchronous else {}
        if lag is not None:
            if not _takes(runner, "lag"):
                raise ParameterError(f"--lag: the {planner} runs of {name} model no lag")
            options["lag"] = lag
        elif deterministic:
            runner_fixed_lag(name, planner, runner, options, seed)
        return lambda s: runner(seed=s, **options)
    if asynchronous:
        return lambda s: run_task(task, planner, seed=s, mode="async", stop_on_success=True).report
    if lag is None and deterministic:
        lag, _ = task_fixed_lag(task, planner, seed)
    return lambda s: run_task(task, planner, seed=s, lag=lag, stop_on_success=True).report


# the failure kinds and report fields of a run are defined once, with the sweep's units
_update_ms = update_ms
_mode = run_mode


def _failure_kind(report: dict) -> str:
    return failure_kind(report) or "timeout"


@dataclass(frozen=True)
class BenchUnit:
    """One run of ``bench tasks``: pair ``pair`` (``task`` × ``planner``) at ``seed``; ``deterministic``,
    ``lag``, ``calibration_seed`` and ``asynchronous`` as :func:`_runner` takes them."""

    task: str
    planner: str
    seed: int
    deterministic: bool = False
    lag: float | None = None
    calibration_seed: int = 0
    pair: int = 0
    asynchronous: bool = False


#: Per-process runners of the pairs seen so far: ``key → (runner, None)`` or ``(None, "error: …")``
#: (a pair's runner is built — and its lag calibrated — once per process, as in a serial run).
_RUNNERS: dict = {}


def run_bench_unit(unit: BenchUnit) -> dict:
    """Run one :class:`BenchUnit` (in a worker or here): ``{"kind": None | "fell" | "timeout" |
    "error: …", "time_to_success": s | None, "update_ms": ms | None, "mode": str | None,
    "replan_hz": updates applied per simulated second | None, "wall_s": wall seconds, including
    building the pair's runner the first time}``."""
    t0 = time.perf_counter()
    key = (unit.task, unit.planner, unit.deterministic, unit.calibration_seed, unit.lag, unit.asynchronous)
    if key not in _RUNNERS:
        try:
            _RUNNERS[key] = (_runner(unit.task, unit.planner, deterministic=unit.deterministic,
                                     seed=unit.calibration_seed, lag=unit.lag, asynchronous=unit.asynchronous),
                             None)
        except ContactoptError as exc:
            _RUNNERS[key] = (None, f"error: {exc}")
    runner, error = _RUNNERS[key]
    out = {"kind": error, "time_to_success": None, "update_ms": None, "mode": None, "replan_hz": None}
    if runner is not None:
        try:
            report = runner(unit.seed)
        except ContactoptError as exc:
            out["kind"] = f"error: {exc}"
        else:
            out["kind"] = failure_kind(report)
            if report.get("success") and report.get("time_to_success") is not None:
                out["time_to_success"] = float(report["time_to_success"])
            out["update_ms"] = update_ms(report)
            if report.get("replan_hz") is not None:
                out["replan_hz"] = float(report["replan_hz"])
            if report.get("mode"):
                out["mode"] = run_mode(report)
            if report.get("mode") == "async" and report.get("realtime_factor") is not None:
                out["realtime_factor"] = float(report["realtime_factor"])
    out["wall_s"] = time.perf_counter() - t0
    return out


def _pair_row(name: str, planner: str, seeds: range, outcomes: list[tuple[int, dict]]) -> dict:
    """The row of one pair from its units' ``(seed, outcome)`` (:func:`run_bench_unit`, seed order)."""
    failures: dict[str, int] = {}
    failed_seeds: dict[str, list[int]] = {}
    tts, ms, hz, rtf, modes = [], [], [], [], set()
    successes = 0
    for seed, o in outcomes:
        if o["kind"] is None:
            successes += 1
            if o["time_to_success"] is not None:
                tts.append(o["time_to_success"])
        else:
            failures[o["kind"]] = failures.get(o["kind"], 0) + 1
            failed_seeds.setdefault(o["kind"], []).append(int(seed))
        if o["update_ms"] is not None:
            ms.append(o["update_ms"])
        if o.get("replan_hz") is not None:
            hz.append(o["replan_hz"])
        if o.get("realtime_factor") is not None:
            rtf.append(o["realtime_factor"])
        if o["mode"]:
            modes.add(o["mode"])
    return {
        "task": name, "planner": planner, "seeds": f"{seeds.start}:{seeds.stop}",
        "successes": successes, "success_rate": successes / len(seeds),
        "time_to_success_median": float(np.median(tts)) if tts else None,
        "update_ms_median": float(np.median(ms)) if ms else None,
        "replan_hz_median": float(np.median(hz)) if hz else None,
        "realtime_factor_median": float(np.median(rtf)) if rtf else None,
        "failures": failures, "failed_seeds": failed_seeds, "mode": "/".join(sorted(modes)) or None,
        "wall_s": round(sum(o["wall_s"] for _, o in outcomes), 1),
    }


_WORKERS = 1


@contextlib.contextmanager
def using_workers(workers: int):
    """Make ``workers`` the default of :func:`run` while the block runs (``bench --workers``)."""
    global _WORKERS
    saved, _WORKERS = _WORKERS, int(workers)
    try:
        yield
    finally:
        _WORKERS = saved


def _run_units(todo, seeds: range, *, workers: int, bar=None, deterministic: bool = False,
               lag: float | None = None, asynchronous: bool = False) -> list[dict]:
    """Rows of the pairs ``todo`` over ``seeds``, their units run on the sweep engine (``workers``
    1: here, serially, in order; more: a local process pool)."""
    from ..sweep.engines import Lost, make_engine

    units = [BenchUnit(name, p, seed, deterministic, lag, seeds.start, i, asynchronous)
             for i, (name, p) in enumerate(todo) for seed in seeds]
    if workers > 1 and deterministic:  # calibrate each pair once, here, before the workers read the cache
        for name, p in todo:
            with contextlib.suppress(ContactoptError):
                _runner(name, p, deterministic=True, seed=seeds.start, lag=lag)
    outcomes: dict[int, list] = {i: [] for i in range(len(todo))}
    try:
        with make_engine(workers, inline=workers == 1) as engine:
            for unit, value, _ in engine.imap_unordered(run_bench_unit, units):
                if isinstance(value, Lost):
                    value = {"kind": f"error: worker lost: {value.message}", "time_to_success": None,
                             "update_ms": None, "mode": None, "wall_s": 0.0}
                outcomes[unit.pair].append((unit.seed, value))
                if bar is not None:
                    successes = sum(v.get("kind") is None for _, v in outcomes[unit.pair])
                    bar.set_postfix_str(f"last: {unit.task}/{unit.planner} seed {unit.seed}; "
                                        f"{successes}/{len(outcomes[unit.pair])} succeeded")
                    bar.update(1)
    finally:
        _RUNNERS.clear()
    return [_pair_row(name, p, seeds, sorted(outcomes[i], key=lambda t: t[0]))
            for i, (name, p) in enumerate(todo)]


def run_pair(name: str, planner: str, seeds: range, *, bar=None, deterministic: bool = False,
             lag: float | None = None) -> dict:
    """One row of the benchmark: ``name`` × ``planner`` over ``seeds``, run here (see the module docstring)."""
    return _run_units([(name, planner)], seeds, workers=1, bar=bar, deterministic=deterministic, lag=lag)[0]


def _loadavg() -> float | None:
    """The 1-minute load average of the machine (other processes included), or None."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def run(models=None, *, min_time: float = 0.2, progress: bool | None = None, seeds="0:8", tasks=None,
        planner: str | None = None, load: bool = False, deterministic: bool = False, lag: float | None = None,
        plots=None, workers: int | None = None, asynchronous: bool = False) -> dict:
    """Run every selected task × planner pair over ``seeds``.

    Args:
      models: unused (tasks are chosen with ``tasks``); kept for the benchmark signature.
      min_time: unused.
      seeds: ``"A:B"``, a count ``N`` (= ``0:N``) or a ``range``.
      tasks: bundled task names and/or task files (default: every bundled task).
      planner: run only this planner (a task with a planner-independent form runs with any).
      load: keep one core busy for the whole run.
      deterministic: pairs whose runs measure the lag use a fixed lag calibrated once per pair on
        this machine (:mod:`contactopt.mpc.calibration`); their ``mode`` reads ``sync fixed lag``.
      lag: a fixed sync-mode lag (s) for every pair (excludes ``deterministic``).
      asynchronous: run every pair in ``mode="async"``, real time at the task's target slowdown
        (excludes ``deterministic`` and ``lag``); the rows' ``mode`` reads ``async``.
      plots: optional existing directory for ``tasks.png`` (success rate per pair).
      workers: run the units (pair × seed) on this many worker processes of the sweep engine
        (:mod:`contactopt.sweep.engines`); 1 (default, or :func:`using_workers`' value) runs them
        here, serially, as before.  A row's ``wall_s`` is the sum of its units' wall seconds.

    Returns:
      ``{"rows": [{"task", "planner", "seeds", "successes", "success_rate",
      "time_to_success_median", "update_ms_median", "replan_hz_median", "realtime_factor_median",
      "failures", "failed_seeds", "mode", "wall_s"}, ...],
      "load": "one core busy" | "none" (the bench's own load process), "cpu_count": int,
      "loadavg_1min": {"start", "end"}}`` (the machine's load average, other processes included:
      a measured-lag rate means little without it).
    """
    if models:
        raise ParameterError("bench tasks chooses tasks with --tasks, not --model")
    seeds = parse_seed_range(seeds)
    if lag is not None and (deterministic or not (np.isfinite(lag) and lag >= 0)):
        raise ParameterError(f"--lag must be seconds >= 0 and excludes --deterministic, got {lag!r}")
    if asynchronous and (deterministic or lag is not None):
        raise ParameterError("--async runs in real time with the lag the planner takes; "
                             "it excludes --deterministic and --lag (both fix a sync-mode lag)")
    todo = pairs(tasks, planner)
    workers = _WORKERS if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ParameterError(f"--workers must be an integer >= 1, got {workers!r}")
    load_before = _loadavg()
    with busy_core(load), progress_bar(total=len(todo) * len(seeds), desc="bench tasks", unit="run",
                                       enable=progress, piped_lines=True) as bar:
        rows = _run_units(todo, seeds, workers=workers, bar=bar, deterministic=deterministic, lag=lag,
                          asynchronous=asynchronous)
    result = {"rows": rows, "load": "one core busy" if load else "none", "cpu_count": os.cpu_count(),
              "loadavg_1min": {"start": load_before, "end": _loadavg()}}
    if plots is not None:
        plot_rates(result, Path(plots) / "tasks.png")
    return result


def plot_rates(result: dict, path) -> None:
    """A horizontal bar chart of each pair's success rate (PNG at ``path``)."""
    from ..plots import new_figure, save_figure

    rows = result["rows"]
    fig, axes = new_figure(1, 1, row_height=max(2.0, 0.35 * len(rows) + 1.0))
    ax = axes[0, 0]
    labels = [f"{r['task']} / {r['planner']}" for r in rows]
    rates = [100 * r["success_rate"] for r in rows]
    y = np.arange(len(rows))
    ax.barh(y, rates, color=["tab:green" if v >= 90 else "tab:orange" if v >= 50 else "tab:red" for v in rates])
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.axvline(90, color="k", lw=0.8, ls="--")
    seeds = rows[0]["seeds"] if rows else ""
    ax.set_xlabel(f"success rate [%] on seeds {seeds} (load: {result['load']})")
    save_figure(fig, path)


def table(result: dict) -> str:
    """The rows as text; failures as ``kind×n`` (error messages cut at 60 characters; ``--json`` has them whole)."""
    rows = []
    for r in result["rows"]:
        fails = ", ".join(f"{k if len(k) <= 60 else k[:57] + '...'}×{n}" for k, n in sorted(r["failures"].items()))
        rows.append({**r, "rate": f"{r['successes']}/{r['successes'] + sum(r['failures'].values())}",
                     "fails": fails or "-"})
    text = format_table(rows, [
        ("task", "task", "{}"), ("planner", "planner", "{}"), ("seeds", "seeds", "{}"), ("rate", "success", "{}"),
        ("time_to_success_median", "t success [s]", "{:.2f}"), ("update_ms_median", "update ms", "{:.1f}"),
        ("replan_hz_median", "replan Hz", "{:.0f}"), ("realtime_factor_median", "RT factor", "{:.2f}"),
        ("mode", "mode", "{}"), ("fails", "failures", "{}"),
    ])
    la = result.get("loadavg_1min") or {}
    return text + (f"\nload process: {result['load']}; {result['cpu_count']} cores; 1-min load average "
                   f"{la.get('start')} at start, {la.get('end')} at end")


register_benchmark(Benchmark(
    name="tasks",
    description="success rate of every task × planner pair over a seed range (--seeds A:B, --tasks, --planner, --load)",
    run=run,
    table=table,
    options=("seeds", "plots", "tasks", "planner", "load", "deterministic", "lag", "asynchronous", "workers"),
))
