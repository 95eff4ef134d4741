"""``contactopt bench ilqg``: iLQG MPC per task — iteration time, success rate, real time, ablation.

For every task registered with the ``ilqg`` planner (or those named with ``--model``,
by task or model name):

* **Iteration time** and its breakdown (derivatives, backward pass, line search): median
  wall milliseconds per MPC update over the success-rate runs.
* **Success rate** over ``--seeds`` seeded initial states (default 10): synchronous
  closed loop with the measured policy lag at the task's target slowdown
  (``lag = update wall time / slowdown``; slowdown 1 = this machine in real time),
  each run stopped once the task has succeeded.
* **Real time**: one asynchronous run (planner and plant threads) at slowdown 1 — the
  real-time factor reached, the measured policy lag, success — and the smallest slowdown
  (from 1, 1.5, 2, 3, 5, 7, 10) at which the asynchronous run of seed 0 succeeds (the
  paper's "how much faster must the computer be").
* **Ablation**: the first plan from ``--seeds`` initial states solved with the seed's
  iLQG (state regularization eq. 10, improved value update eq. 11) and with textbook iLQG
  (``Q_uu + μI``, standard update), up to ``ABLATION_ITERATIONS`` iterations each.  With
  ``J*`` the lower of the two final costs of a problem, "iterations to the same cost" is
  the first iteration at which a solver's cost is within 1 % of its initial gap
  ``J₀ − J*`` above ``J*``; a solver that never gets there (or diverges) counts as a failure.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ParameterError
from ..progress import progress_bar
from . import Benchmark, format_table, register_benchmark

__all__ = ["run", "ilqg_tasks", "ablation"]

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


def run(models=None, *, min_time: float = 0.2, progress: bool | None = None, seeds: int = 10,
        ablation_seeds: int | None = None, slowdown_search: bool = True) -> dict:
    """Run the benchmark (see the module docstring); ``models`` filter the tasks.

    Returns:
      ``{"tasks": [{"task", "target_slowdown", "success_rate", "seeds", "iteration_ms",
      "iteration_ms_p95", "derivatives_ms", "backward_ms", "line_search_ms", "policy_lag_ms",
      "time_to_success_median", "async_realtime_factor", "async_policy_lag_ms", "async_success",
      "min_slowdown", "ablation"}, ...]}``.
    """
    from ..mpc.runner import BREAKDOWN_KEYS
    from ..tasks.mpc_task import run_ilqg_task

    if int(seeds) != seeds or seeds < 1:
        raise ParameterError(f"seeds must be a positive integer, got {seeds!r}")
    seeds = int(seeds)
    n_ablation = seeds if ablation_seeds is None else int(ablation_seeds)
    rows = []
    tasks = ilqg_tasks(models)
    with progress_bar(total=len(tasks) * (seeds + 2 + n_ablation), desc="bench ilqg", unit="run",
                      enable=progress) as bar:
        for task in tasks:
            target = float(getattr(task, "target_slowdown", 1.0))
            results = []
            for seed in range(seeds):
                res, _ = run_ilqg_task(task, seed=seed, mode="sync", lag="measured", slowdown=target,
                                       stop_on_success=True)
                results.append(res)
                bar.update(1)
            it = np.concatenate([r.iteration_ms() for r in results])
            parts = {}
            for key in BREAKDOWN_KEYS:      # derivatives, solve (the backward pass), line_search
                vals = [u.breakdown.get(key, 0.0) * 1e3 for r in results for u in r.updates]
                parts[key] = float(np.median(vals)) if vals else None
            lags = np.concatenate([r.policy_lag_ms() for r in results])
            tts = [r.time_to_success for r in results if r.success]
            areal, _ = run_ilqg_task(task, seed=0, mode="async", slowdown=1.0)
            bar.update(1)
            min_slowdown, tried = None, {}
            if slowdown_search:
                from ..mpc import find_min_slowdown

                min_slowdown, tried = find_min_slowdown(
                    lambda sd: run_ilqg_task(task, seed=0, mode="async", slowdown=sd, stop_on_success=True)[0],
                    SLOWDOWN_CANDIDATES)
            bar.update(1)
            abl = ablation(task, range(n_ablation)) if n_ablation else None
            bar.update(n_ablation)
            rows.append({
                "task": task.name,
                "target_slowdown": target,
                "seeds": seeds,
                "success_rate": sum(r.success for r in results) / seeds,
                "iteration_ms": float(np.median(it)) if it.size else None,
                "iteration_ms_p95": float(np.percentile(it, 95)) if it.size else None,
                "derivatives_ms": parts["derivatives"],
                "backward_ms": parts["solve"],
                "line_search_ms": parts["line_search"],
                "policy_lag_ms": float(np.median(lags)) if lags.size else None,
                "time_to_success_median": float(np.median(tts)) if tts else None,
                "async_realtime_factor": float(areal.realtime_factor),
                "async_policy_lag_ms": areal.summary()["policy_lag_ms"],
                "async_success": bool(areal.success),
                "min_slowdown": min_slowdown,
                "slowdowns_tried": {str(k): v for k, v in tried.items()},
                "ablation": abl,
            })
    return {"tasks": rows}


def table(result: dict) -> str:
    """Two tables: the closed-loop rows and the ablation."""
    rows = []
    for r in result["tasks"]:
        a = r["ablation"] or {}
        rows.append({**r, "success": f"{r['success_rate'] * 100:.0f}% @{r['target_slowdown']:g}x",
                     "async": f"{r['async_realtime_factor']:.2f} ({'ok' if r['async_success'] else 'fail'})",
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
    run, table, ("seeds",)))
