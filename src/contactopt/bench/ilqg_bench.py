"""``contactopt bench ilqg``: iLQG MPC per task — iteration time, success rate, real time, ablation.

For every task registered with the ``ilqg`` planner (or those named with ``--model``,
by task or model name):

* **Iteration time** and its breakdown (derivatives, backward pass, line search): median
  wall milliseconds per MPC update over the success-rate runs.
* **Success rate** over ``--seeds`` seeded initial states (``N`` or ``A:B``, default 10):
  synchronous closed loop with the measured policy lag at the task's target slowdown
  (``lag = update wall time / slowdown``; slowdown 1 = this machine in real time),
  each run stopped once the task has succeeded.  These runs are units on the sweep engine
  (:mod:`contactopt.sweep.engines`): ``bench ilqg --workers N`` runs them on a local process
  pool of ``N`` single-threaded workers.
* **Real time**: one asynchronous run (planner and plant threads) at slowdown 1 — the
  real-time factor reached, the measured policy lag, success — and the smallest slowdown
  (from 1, 1.5, 2, 3, 5, 7, 10) at which the asynchronous run of the first seed succeeds
  (the paper's "how much faster must the computer be").  Always serial, after the pool
  has stopped: they measure wall-clock real time and must not share the CPU.
* **Ablation**: the first plan from the ``--seeds`` initial states solved with the seed's
  iLQG (state regularization eq. 10, improved value update eq. 11) and with textbook iLQG
  (``Q_uu + μI``, standard update), up to ``ABLATION_ITERATIONS`` iterations each.  With
  ``J*`` the lower of the two final costs of a problem, "iterations to the same cost" is
  the first iteration at which a solver's cost is within 1 % of its initial gap
  ``J₀ − J*`` above ``J*``; a solver that never gets there (or diverges) counts as a failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError
from ..progress import progress_bar
from . import Benchmark, format_table, register_benchmark

__all__ = ["ILQGSeedUnit", "ablation", "ilqg_tasks", "run", "run_ilqg_seed_unit"]

SLOWDOWN_CANDIDATES = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0)
ABLATION_ITERATIONS = 40
ABLATION_TOLERANCE = 0.01


def ilqg_tasks(names=None) -> list:
    """The :class:`~contactopt.tasks.mpc_task.MPCTask` s with an ``ilqg`` runner (filtered by task or model name)."""
    from ..tasks import available_tasks

    tasks = [spec.runners["ilqg"].task for spec in available_tasks().values()
             if "ilqg" in spec.runners and hasattr(spec.runners["ilqg"], "task")]
    if names:
        wanted = set(names)
        picked = [t for t in tasks if t.name in wanted or t.model in wanted]
        unknown = wanted - {t.name for t in picked} - {t.model for t in picked}
        if unknown:
            raise ParameterError(f"no iLQG task for {', '.join(sorted(unknown))} (tasks: "
                                 f"{', '.join(t.name for t in tasks)})")
        tasks = picked
    return sorted(tasks, key=lambda t: t.name)


def _iterations_to(costs: list[float], target: float) -> int | None:
    for i, c in enumerate(costs):
        if c <= target:
            return i
    return None


def ablation(task, seeds, iterations: int = ABLATION_ITERATIONS) -> dict:
    """Seed-paper iLQG vs textbook iLQG on the first plan of ``task`` from each seed's state.

    Returns:
      ``{"improved": {...}, "textbook": {...}}`` with ``iterations_median`` (to within 1 % of
      the best cost found), ``failures`` and ``final_cost_median`` per variant.
    """
    import mujoco

    from ..tasks.mpc_task import build_ilqg_planner

    plant = task.plant_model()
    traces = {"improved": [], "textbook": []}
    for seed in seeds:
        data = mujoco.MjData(plant)
        task.initial_state(plant, data, np.random.default_rng(seed))
        x0 = np.concatenate([data.qpos, data.qvel, data.act])
        for variant in traces:
            # no early stop: both variants get the whole iteration budget
            settings = {**task.ilqg.get("settings", {}), "tol_cost": 0.0, "tol_grad": 0.0}
            planner = build_ilqg_planner(task, textbook=variant == "textbook", initial_iterations=iterations,
                                         settings=settings)
            try:
                upd = planner.reset(0.0, x0)
                res = planner.result
                if upd.policy is None or res is None:
                    traces[variant].append(None)
                    continue
                costs = [res.log[0].cost] + [log.new_cost for log in res.log]
                traces[variant].append(costs)
            finally:
                planner.dynamics.close()
    out = {}
    for variant, runs in traces.items():
        its, finals, fails = [], [], 0
        for i, costs in enumerate(runs):
            other = traces["textbook" if variant == "improved" else "improved"][i]
            if costs is None:
                fails += 1
                continue
            best = min(min(costs), min(other) if other else math.inf)
            target = best + ABLATION_TOLERANCE * (costs[0] - best)
            n = _iterations_to(costs, target + 1e-12 * abs(best))
            finals.append(costs[-1])
            if n is None:
                fails += 1
            else:
                its.append(n)
        out[variant] = {"iterations_median": float(np.median(its)) if its else None,
                        "failures": fails, "problems": len(runs),
                        "final_cost_median": float(np.median(finals)) if finals else None}
    return out


@dataclass(frozen=True)
class ILQGSeedUnit:
    """One success-rate run of the benchmark: ``task`` (an iLQG task name) from ``seed``, closed
    loop in sync mode at ``slowdown`` (wall seconds per simulated second) with policy ``lag``
    (``"measured"`` or seconds), stopped once the task has succeeded."""

    task: str
    seed: int
    slowdown: float
    lag: float | str = "measured"


def run_ilqg_seed_unit(unit: ILQGSeedUnit) -> dict:
    """Run one :class:`ILQGSeedUnit` (here or in a sweep-engine worker) and summarize it.

    Returns:
      picklable ``{"seed", "success": bool, "time_to_success": s | None, "iteration_ms": (n,)
      wall ms per MPC update, "breakdown_ms": {key: (n,) wall ms of each
      :data:`~contactopt.mpc.runner.BREAKDOWN_KEYS` phase per update (0 where absent)},
      "policy_lag_ms": (m,) simulated ms per applied update}``.
    """
    from ..mpc.runner import BREAKDOWN_KEYS
    from ..tasks.mpc_task import run_ilqg_task

    task = ilqg_tasks([unit.task])[0]
    res, _ = run_ilqg_task(task, seed=unit.seed, mode="sync", lag=unit.lag, slowdown=unit.slowdown,
                           stop_on_success=True)
    return {"seed": unit.seed, "success": bool(res.success), "time_to_success": res.time_to_success,
            "iteration_ms": res.iteration_ms(),
            "breakdown_ms": {k: np.array([u.breakdown.get(k, 0.0) * 1e3 for u in res.updates])
                             for k in BREAKDOWN_KEYS},
            "policy_lag_ms": res.policy_lag_ms()}


def _seed_range(seeds) -> range:
    """``seeds`` as a range: a count ``N`` → ``range(0, N)``; a non-empty ``range`` of step 1 as is."""
    if isinstance(seeds, range):
        if len(seeds) < 1 or seeds.step != 1 or seeds.start < 0:
            raise ParameterError(f"seeds must be a non-empty range A:B of seeds >= 0, got {seeds!r}")
        return seeds
    if isinstance(seeds, bool) or not isinstance(seeds, (int, np.integer)) or seeds < 1:
        raise ParameterError(f"seeds must be a positive integer or a range, got {seeds!r}")
    return range(int(seeds))


def _sync_runs(units: list, workers: int, bar) -> dict:
    """``{(task, seed): run_ilqg_seed_unit summary}`` of ``units`` on the sweep engine (``workers``
    1: here, in order; more: a local process pool).  A unit whose worker died every time counts
    as an unsuccessful run without timings (``"lost"``: the reason)."""
    from ..sweep.engines import Lost, make_engine

    out = {}
    with make_engine(workers, inline=workers == 1) as engine:
        for unit, value, _ in engine.imap_unordered(run_ilqg_seed_unit, units):
            if isinstance(value, Lost):
                value = {"seed": unit.seed, "success": False, "time_to_success": None, "iteration_ms": np.zeros(0),
                         "breakdown_ms": {}, "policy_lag_ms": np.zeros(0), "lost": value.message}
            out[(unit.task, unit.seed)] = value
            bar.update(1)
    return out


def run(models=None, *, min_time: float = 0.2, progress: bool | None = None, seeds: int | range = 10,
        ablation_seeds: int | None = None, slowdown_search: bool = True, workers: int | None = None,
        realtime: bool = True, lag: float | str = "measured") -> dict:
    """Run the benchmark (see the module docstring); ``models`` filter the tasks.

    The success-rate runs (every task × seed, sync mode, so their outcome depends on the
    machine only through the measured lag) are units on the sweep engine: with ``workers`` > 1
    they run at once on a local process pool of single-threaded workers (then the measured
    iteration times and lags are those of one thread sharing the machine: keep ``workers`` at
    most the idle cores).  The asynchronous real-time run, the slowdown search and the ablation
    run afterwards, serially, alone: they measure wall-clock real time and must not share the CPU.

    Args:
      models: task or model names (default: every iLQG task).
      min_time: unused.
      progress: progress bar (None: only on a terminal).
      seeds: a count ``N`` (seeds ``0 … N−1``) or a ``range`` (``bench ilqg --seeds A:B``) of the
        success-rate runs.
      ablation_seeds: problems of the ablation (seeds ``0 … n−1``; default: ``seeds``' range).
      slowdown_search: search the smallest real-time slowdown (``min_slowdown``; else None).
      workers: processes of the sweep engine (default 1, or ``bench --workers``).
      realtime: run the asynchronous real-time run (False: its ``async_*`` keys are None).
      lag: the success-rate runs' policy lag: ``"measured"`` (``update wall time / slowdown``)
        or fixed seconds (reproducible: the runs then do not depend on the machine's load).

    Returns:
      ``{"tasks": [{"task", "target_slowdown", "success_rate", "seeds", "iteration_ms",
      "iteration_ms_p95", "derivatives_ms", "backward_ms", "line_search_ms", "policy_lag_ms",
      "time_to_success_median", "async_realtime_factor", "async_policy_lag_ms", "async_success",
      "min_slowdown", "ablation"}, ...]}``; ``seeds`` is the number of success-rate runs; a row
      whose runs lost their worker also has ``lost_seeds``.  Times are ms (wall, except the
      simulated policy lag) and s (``time_to_success_median``, simulated).
    """
    from ..mpc.runner import BREAKDOWN_KEYS
    from ..tasks.mpc_task import run_ilqg_task
    from . import tasks_bench

    seeds = _seed_range(seeds)
    workers = tasks_bench._WORKERS if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ParameterError(f"--workers must be an integer >= 1, got {workers!r}")
    if isinstance(lag, str) and lag != "measured":
        raise ParameterError(f"lag must be seconds >= 0 or 'measured', got {lag!r}")
    if not isinstance(lag, str) and (isinstance(lag, bool) or not isinstance(lag, (int, float))
                                     or not (math.isfinite(lag) and lag >= 0)):
        raise ParameterError(f"lag must be seconds >= 0 or 'measured', got {lag!r}")
    ablation_range = seeds if ablation_seeds is None else range(int(ablation_seeds))
    rows = []
    tasks = ilqg_tasks(models)
    targets = {t.name: float(getattr(t, "target_slowdown", 1.0)) for t in tasks}
    units = [ILQGSeedUnit(t.name, s, targets[t.name], lag) for t in tasks for s in seeds]
    with progress_bar(total=len(tasks) * (len(seeds) + 2 + len(ablation_range)), desc="bench ilqg", unit="run",
                      enable=progress, piped_lines=True) as bar:
        runs = _sync_runs(units, workers, bar)
        for task in tasks:  # serial from here: the real-time runs must have the machine to themselves
            target = targets[task.name]
            results = [runs[(task.name, s)] for s in seeds]
            it = np.concatenate([r["iteration_ms"] for r in results])
            parts = {}
            for key in BREAKDOWN_KEYS:      # derivatives, solve (the backward pass), line_search
                vals = np.concatenate([r["breakdown_ms"].get(key, np.zeros(0)) for r in results])
                parts[key] = float(np.median(vals)) if vals.size else None
            lags = np.concatenate([r["policy_lag_ms"] for r in results])
            tts = [r["time_to_success"] for r in results if r["success"]]
            areal = None
            if realtime:
                areal, _ = run_ilqg_task(task, seed=seeds[0], mode="async", slowdown=1.0)
            bar.update(1)
            min_slowdown, tried = None, {}
            if slowdown_search:
                from ..mpc import find_min_slowdown

                min_slowdown, tried = find_min_slowdown(
                    lambda sd: run_ilqg_task(task, seed=seeds[0], mode="async", slowdown=sd,
                                             stop_on_success=True)[0],
                    SLOWDOWN_CANDIDATES)
            bar.update(1)
            abl = ablation(task, ablation_range) if len(ablation_range) else None
            bar.update(len(ablation_range))
            row = {
                "task": task.name,
                "target_slowdown": target,
                "seeds": len(seeds),
                "success_rate": sum(r["success"] for r in results) / len(seeds),
                "iteration_ms": float(np.median(it)) if it.size else None,
                "iteration_ms_p95": float(np.percentile(it, 95)) if it.size else None,
                "derivatives_ms": parts["derivatives"],
                "backward_ms": parts["solve"],
                "line_search_ms": parts["line_search"],
                "policy_lag_ms": float(np.median(lags)) if lags.size else None,
                "time_to_success_median": float(np.median(tts)) if tts else None,
                "async_realtime_factor": None if areal is None else float(areal.realtime_factor),
                "async_policy_lag_ms": None if areal is None else areal.summary()["policy_lag_ms"],
                "async_success": None if areal is None else bool(areal.success),
                "min_slowdown": min_slowdown,
                "slowdowns_tried": {str(k): v for k, v in tried.items()},
                "ablation": abl,
            }
            lost = [r["seed"] for r in results if "lost" in r]
            if lost:
                row["lost_seeds"] = lost
            rows.append(row)
    return {"tasks": rows}


def table(result: dict) -> str:
    """Two tables: the closed-loop rows and the ablation."""
    rows = []
    for r in result["tasks"]:
        a = r["ablation"] or {}
        rows.append({**r, "success": f"{r['success_rate'] * 100:.0f}% @{r['target_slowdown']:g}x",
                     "async": "-" if r["async_realtime_factor"] is None else
                     f"{r['async_realtime_factor']:.2f} ({'ok' if r['async_success'] else 'fail'})",
                     "improved": _abl(a.get("improved")), "textbook": _abl(a.get("textbook"))})
    return format_table(rows, [
        ("task", "task", "{}"),
        ("success", "success (sync, measured lag)", "{}"),
        ("iteration_ms", "iter ms", "{:.1f}"),
        ("iteration_ms_p95", "p95", "{:.1f}"),
        ("derivatives_ms", "deriv", "{:.1f}"),
        ("backward_ms", "backward", "{:.1f}"),
        ("line_search_ms", "line search", "{:.1f}"),
        ("policy_lag_ms", "lag ms", "{:.1f}"),
        ("async", "async RT factor", "{}"),
        ("min_slowdown", "min slowdown", "{}"),
        ("improved", "iters to cost (fail) seed iLQG", "{}"),
        ("textbook", "textbook", "{}"),
    ])


def _abl(a) -> str:
    if not a:
        return "-"
    it = "-" if a["iterations_median"] is None else f"{a['iterations_median']:g}"
    return f"{it} ({a['failures']}/{a['problems']})"


register_benchmark(Benchmark(
    "ilqg",
    "iLQG MPC per task: iteration time, success rate, real-time factor, ablation vs textbook",
    run, table, ("seeds", "workers")))
