"""``contactopt bench smooth-contact``: the humanoid get-up of the online-iLQG paper on its smooth contact model.

The paper (Tassa, Erez & Todorov 2012, §VI) plans with the smooth diagonal contact model at
η = 0.4 and an 8 ms step and simulates the plant with η = 0.7 at 2 ms ("stiffer contact in the
plant than in the model").  This benchmark runs ``humanoid-getup`` with iLQG MPC in closed loop
in that configuration and next to MuJoCo's own contacts, over a seed range:

* ``paper`` — planner :class:`~contactopt.contact.SmoothContactDynamics` (η 0.4, 8 ms), plant the
  smooth model (η 0.7, the task's 2 ms step);
* ``mujoco`` — planner and plant with MuJoCo's contacts, the planner at the same 8 ms;
* ``smooth-planner`` — the paper's planner on the MuJoCo plant (the smooth model as a model error);

and, for the paper's comparison of η values, the smooth planner's η swept (:data:`ETAS`) against
the smooth plant on the first :data:`ETA_SEEDS` seeds of the range.

Every run uses the sync loop with a fixed policy lag (:data:`LAG`, simulated seconds): the
smooth planner is a Python model, several times slower per iteration than MuJoCo's compiled
step, so a measured lag would compare the machines, not the contact models.  Each run is one
unit on the sweep engine (``bench --workers N``); a run stops at its first success.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ContactoptError, ParameterError
from ..progress import progress_bar
from ..sweep.units import error_kind, failure_kind
from . import Benchmark, format_table, register_benchmark

__all__ = [
    "CONFIGS",
    "ETAS",
    "ETA_SEEDS",
    "LAG",
    "PLANNER_TIMESTEP",
    "SmoothUnit",
    "plot_eta",
    "run",
    "run_smooth_unit",
    "table",
]

TASK = "humanoid-getup"
#: the planner's time step [s] (the paper's controller: 8 ms); the plant keeps the task's 2 ms
PLANNER_TIMESTEP = 0.008
#: fixed policy lag of every run [simulated s]: two planner steps
LAG = 0.016
#: ``name -> (planner dynamics, planner η, plant contact, plant η)``
CONFIGS = {
    "paper": ("smooth", 0.4, "smooth", 0.7),
    "mujoco": ("mujoco", None, "mujoco", None),
    "smooth-planner": ("smooth", 0.4, "mujoco", None),
}
#: planner η values of the comparison (plant: the smooth model at η 0.7)
ETAS = (0.2, 0.4, 0.7, 1.0)
#: seeds of the η comparison: the first this many of the range
ETA_SEEDS = 8


@dataclass(frozen=True)
class SmoothUnit:
    """One closed-loop get-up: ``config`` (a key of :data:`CONFIGS`, or ``"eta"`` for the η
    comparison with planner η ``eta``) at ``seed``, for ``seconds`` simulated seconds (None: the
    task's 5 s)."""

    config: str
    seed: int
    eta: float | None = None
    seconds: float | None = None


def _settings(unit: SmoothUnit) -> tuple[dict, str, float]:
    if unit.config == "eta":
        dyn, eta, plant, plant_eta = "smooth", unit.eta, "smooth", 0.7
    else:
        dyn, eta, plant, plant_eta = CONFIGS[unit.config]
    settings = {"timestep": PLANNER_TIMESTEP, "dynamics": dyn}
    if eta is not None:
        settings["contact_eta"] = eta
    return settings, plant, 0.7 if plant_eta is None else plant_eta


def run_smooth_unit(unit: SmoothUnit) -> dict:
    """Run one get-up (here or in a worker): ``{"kind", "time_to_success", "iteration_ms", "wall_s"}``
    (``kind`` None = success, else ``bench tasks``' failure kinds)."""
    from ..mpc.task_runner import run_task
    from ..tasks import load_task

    t0 = time.perf_counter()
    settings, plant, plant_eta = _settings(unit)
    try:
        report = run_task(load_task(TASK).task(), "ilqg", seed=unit.seed, seconds=unit.seconds, lag=LAG,
                          settings=settings, plant_contact=plant, plant_eta=plant_eta, stop_on_success=True).report
        kind, tts, ms = failure_kind(report), report.get("time_to_success"), report.get("iteration_ms_median")
    except ContactoptError as exc:
        kind, tts, ms = error_kind(exc), None, None
    return {"kind": kind, "time_to_success": tts, "iteration_ms": ms, "wall_s": time.perf_counter() - t0}


def _summary(outcomes: list[dict], seeds: range) -> dict:
    ok = [o for o in outcomes if o["kind"] is None]
    fails: dict = {}
    for o in outcomes:
        if o["kind"] is not None:
            fails[o["kind"]] = fails.get(o["kind"], 0) + 1
    tts = sorted(o["time_to_success"] for o in ok)
    ms = sorted(o["iteration_ms"] for o in outcomes if o["iteration_ms"] is not None)
    return {"success_rate": len(ok) / len(seeds), "successes": len(ok), "seeds": f"{seeds.start}:{seeds.stop}",
            "time_to_success_median": round(tts[len(tts) // 2], 3) if tts else None,
            "iteration_ms_median": round(ms[len(ms) // 2], 1) if ms else None, "failures": fails}


def run(models=None, *, min_time: float = 0.2, progress: bool | None = None, seeds="0:32", plots=None,
        workers: int | None = None, configs=None, etas=ETAS, seconds: float | None = None) -> dict:
    """Success of the humanoid get-up per contact configuration and per planner η.

    Args:
      models, min_time: unused.
      seeds: ``"A:B"`` or a count: the seeds of every configuration; the η comparison runs the
        first :data:`ETA_SEEDS` of them.
      plots: optional existing directory for ``smooth_contact_eta.png``.
      workers: worker processes of the sweep engine (default 1, or ``bench --workers``).
      configs: subset of :data:`CONFIGS` (default all); etas: planner η values (``()``: none).
      seconds: simulated seconds of each run (default the task's 5 s; shorter runs are a smoke
        test, their success rates are not the task's).

    Returns:
      ``{"configs": [{"config", "planner", "plant", "success_rate", "successes", "seeds",
      "time_to_success_median", "iteration_ms_median", "failures"}, …], "eta": [{"eta", …}, …],
      "lag_s", "planner_timestep", "loadavg_1min", "cpu_count", "workers", "wall_s", "plots"}``.
    """
    from ..sweep.engines import Lost, make_engine
    from . import tasks_bench

    if models:
        raise ParameterError("bench smooth-contact runs humanoid-getup; it takes no --model")
    seeds = tasks_bench.parse_seed_range(seeds)
    if plots is not None and not Path(plots).is_dir():
        raise ParameterError(f"--plots: {plots} is not an existing directory")
    configs = list(CONFIGS) if configs is None else list(configs)
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        raise ParameterError(f"unknown configuration(s) {', '.join(sorted(unknown))} (known: {', '.join(CONFIGS)})")
    for eta in etas:
        if not 0 < eta <= 1:
            raise ParameterError(f"planner η must be in (0, 1], got {eta}")
    workers = tasks_bench._WORKERS if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ParameterError(f"--workers must be an integer >= 1, got {workers!r}")
    eta_seeds = seeds[:ETA_SEEDS]
    if seconds is not None and not (isinstance(seconds, (int, float)) and 0 < seconds < float("inf")):
        raise ParameterError(f"seconds must be a positive number, got {seconds!r}")
    units = [SmoothUnit(c, s, None, seconds) for c in configs for s in seeds]
    paper_eta = CONFIGS["paper"][1]
    units += [SmoothUnit("eta", s, float(e), seconds) for e in etas for s in eta_seeds
              if not (e == paper_eta and "paper" in configs)]
    outcomes: dict = {}
    load_start = tasks_bench._loadavg()
    t0 = time.perf_counter()
    with progress_bar(total=len(units), desc="bench smooth-contact", unit="run", enable=progress, piped_lines=True) as bar, \
            make_engine(workers, inline=workers == 1) as engine:
        for unit, value, _ in engine.imap_unordered(run_smooth_unit, units):
            if isinstance(value, Lost):
                value = {"kind": f"error: worker lost: {value.message}", "time_to_success": None,
                         "iteration_ms": None, "wall_s": 0.0}
            outcomes.setdefault((unit.config, unit.eta), {})[unit.seed] = value
            bar.update(1)
    rows = []
    for c in configs:
        dyn, eta, plant, plant_eta = CONFIGS[c]
        rows.append({"config": c, "planner": dyn if eta is None else f"{dyn} η={eta:g}",
                     "plant": plant if plant_eta is None else f"{plant} η={plant_eta:g}",
                     **_summary([outcomes[(c, None)][s] for s in seeds], seeds)})
    eta_rows = []
    for e in etas:
        key = ("paper", None) if (e == paper_eta and "paper" in configs) else ("eta", float(e))
        eta_rows.append({"eta": float(e), **_summary([outcomes[key][s] for s in eta_seeds], eta_seeds)})
    result = {"configs": rows, "eta": eta_rows, "lag_s": LAG, "planner_timestep": PLANNER_TIMESTEP,
              "seconds": seconds,
              "loadavg_1min": {"start": load_start, "end": tasks_bench._loadavg()}, "cpu_count": os.cpu_count(),
              "workers": workers, "wall_s": round(time.perf_counter() - t0, 1), "plots": []}
    if plots is not None and eta_rows:
        path = Path(plots) / "smooth_contact_eta.png"
        plot_eta(result, path)
        result["plots"].append(str(path))
    return result


def plot_eta(result: dict, path) -> None:
    """Success rate and median time to stand against the smooth planner's η (PNG, atomic), with
    the MuJoCo-contact planner's rate on the same seeds as a reference line where it ran."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..plots import save_figure

    rows = result["eta"]
    fig = Figure(figsize=(7.0, 3.0), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax, ax2 = fig.subplots(1, 2)
    etas = [r["eta"] for r in rows]
    ax.plot(etas, [r["success_rate"] for r in rows], "o-", lw=1.5, label="smooth planner, smooth plant η 0.7")
    for r in result["configs"]:
        if r["config"] == "mujoco":
            ax.axhline(r["success_rate"], color="0.5", ls="--", lw=1, label=f"MuJoCo contacts (seeds {r['seeds']})")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("planner η (eq. 17)")
    ax.set_ylabel("success rate")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    ax2.plot(etas, [r["time_to_success_median"] if r["time_to_success_median"] is not None else float("nan")
                    for r in rows], "o-", lw=1.5)
    ax2.set_xlabel("planner η (eq. 17)")
    ax2.set_ylabel("median time to stand [s]")
    ax2.grid(alpha=0.3)
    seeds = rows[0]["seeds"] if rows else "?"
    fig.suptitle(f"humanoid-getup, iLQG on the smooth contact model (seeds {seeds}, lag {result['lag_s'] * 1e3:g} ms)",
                 fontsize=9)
    save_figure(fig, path)


def table(result: dict) -> str:
    """The configurations, then the η comparison, then the machine."""
    fmt_rate = "{}"
    lines = [format_table([{**r, "rate": f"{r['successes']}/{len(range(*map(int, r['seeds'].split(':'))))}"}
                           for r in result["configs"]],
                          [("config", "config", "{}"), ("planner", "planner", "{}"), ("plant", "plant", "{}"),
                           ("rate", "successes", fmt_rate), ("seeds", "seeds", "{}"),
                           ("time_to_success_median", "median time to stand [s]", "{}"),
                           ("iteration_ms_median", "iteration [ms]", "{}"), ("failures", "failures", "{}")])]
    if result["eta"]:
        lines.append("\nplanner η against the smooth plant (η 0.7):")
        lines.append(format_table([{**r, "rate": f"{r['successes']}/{len(range(*map(int, r['seeds'].split(':'))))}"}
                                   for r in result["eta"]],
                                  [("eta", "η", "{:g}"), ("rate", "successes", fmt_rate), ("seeds", "seeds", "{}"),
                                   ("time_to_success_median", "median time to stand [s]", "{}")]))
    la = result.get("loadavg_1min") or {}
    lines.append(f"sync mode, fixed lag {result['lag_s'] * 1e3:g} ms, planner step {result['planner_timestep'] * 1e3:g} "
                 f"ms; {result['cpu_count']} cores, {result['workers']} worker(s), {result['wall_s']} s; 1-min load "
                 f"average {la.get('start')} at start, {la.get('end')} at end")
    lines += [f"plot {p}" for p in result.get("plots", [])]
    return "\n".join(lines)


register_benchmark(Benchmark(
    name="smooth-contact",
    description="humanoid get-up with iLQG on the iLQG paper's smooth contact model (planner η 0.4 at 8 ms, "
                "plant η 0.7) next to MuJoCo contacts, and planner η swept (--seeds A:B, --plots)",
    run=run,
    table=table,
    options=("seeds", "plots", "workers"),
))
