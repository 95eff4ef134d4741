"""``contactopt bench gdd``: the goal-directed dynamics paper's two tables (seed section VI).

For each model (the humanoid and the hand, or each ``--model``):

1. a dataset of 20,000 records is recorded from scripted goal-directed sessions
   (:func:`contactopt.solvers.gdd.dataset.record`: the ``humanoid-reach`` / ``hand-reach``
   sessions; any other MJCF gets goals on the 2–3 bodies farthest along its kinematic
   tree and keeps its own floor contacts).  ``--model FILE.npz`` replays a dataset
   saved with ``python -m contactopt.solvers.gdd.dataset record``;
2. the records are replayed offline (:func:`contactopt.solvers.gdd.dataset.replay`) on one
   thread: µs per step of ``forward`` (``mj_forward``), ``goal-directed`` (the GDD solve
   including its one MuJoCo evaluation) and ``goal-directed + forward`` (plus the
   warm-started forward check) — the first table; ``ratio = gdd_us / forward_us`` is
   measured in the same run;
3. the statistics median (95th percentile) of constraints (rows of J), iterations, dual
   updates, physics violation ‖a_gdd − a_forward‖ (m/s²) and residual gradient (N) —
   the second table.

The number of records defaults to 20,000 (the seed's); the environment variable
``CONTACTOPT_GDD_RECORDS`` or ``run(records=N)`` chooses another.  Targets (issue 6):
goal-directed ≤ 2× forward (aim 1.5×), median iterations ≤ 5, physics violation median
≤ 1e-8 and 95th percentile ≤ 1e-6, residual gradient 95th percentile ≤ 1e-6; each row
says which it meets (``targets``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..errors import ParameterError
from . import Benchmark, format_table, register_benchmark
from .timing import DEFAULT_REPEATS, check_repeats, load_average

__all__ = ["run", "table", "benchmark_model", "PAPER", "TARGETS"]

DEFAULT_MODELS = ("humanoid", "hand")

#: the seed's numbers (Intel i7-6700K 4 GHz, one thread): µs per step and median (95th pct)
PAPER = {
    "humanoid": {"forward_us": 49, "gdd_us": 90, "gdd_forward_us": 99,
                 "constraints": "23 (38)", "iterations": "4 (9)", "dual_updates": "1 (1)",
                 "physics_violation": "3e-11 (6e-7)", "residual_gradient": "1e-7 (1e-6)"},
    "hand": {"forward_us": 128, "gdd_us": 182, "gdd_forward_us": 194,
             "constraints": "19 (30)", "iterations": "5 (9)", "dual_updates": "1 (3)",
             "physics_violation": "2e-8 (5e-7)", "residual_gradient": "1e-9 (8e-9)"},
}

#: issue 6 targets: key -> (row key, bound)
TARGETS = {
    "ratio_le_2": ("ratio", 2.0),
    "ratio_le_1.5_aim": ("ratio", 1.5),
    "iterations_median_le_5": ("iterations_median", 5.0),
    "physics_violation_median_le_1e-8": ("physics_violation_median", 1e-8),
    "physics_violation_p95_le_1e-6": ("physics_violation_p95", 1e-6),
    "residual_gradient_p95_le_1e-6": ("residual_gradient_p95", 1e-6),
}


def _records_default() -> int:
    text = os.environ.get("CONTACTOPT_GDD_RECORDS")
    if not text:
        from ..solvers.gdd.dataset import DEFAULT_RECORDS

        return DEFAULT_RECORDS
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ParameterError(f"CONTACTOPT_GDD_RECORDS must be a positive integer, got {text!r}")
    return n


def benchmark_model(model: str, *, records: int | None = None, seconds: float | None = None,
                    min_time: float = 0.2, progress: bool | None = None, repeats: int = DEFAULT_REPEATS) -> dict:
    """One row: record (or load) a dataset of ``model`` and replay it.

    Args:
      model: ``"humanoid"``, ``"hand"``, an MJCF/URDF path, or a dataset ``.npz``.
      records: number of records to record (default 20,000 or ``CONTACTOPT_GDD_RECORDS``).
      seconds: session length, s (default: the preset's).
      min_time: least seconds of timed calls per replay pass (short datasets are replayed
        several times and the fastest pass kept).
      progress: progress bars (None: only on a terminal).
      repeats: fewest replay repeats; ``ratio`` (= ``ratio_median``) is the median of the
        per-repeat ratios of passes timed back to back, ``ratio_iqr`` their ``[q25, q75]``.

    Returns:
      the :func:`contactopt.solvers.gdd.dataset.replay` dict plus ``name``, ``nv``, ``nu``,
      ``record_seconds``, ``sessions_fell``, ``sessions_succeeded``, ``paper`` and ``targets``.

    Raises:
      ParameterError: no actuators, no body to put a goal on, a bad dataset.
      ModelNotFoundError / ModelLoadError: the model cannot be found or compiled.
    """
    from ..model import load_model, model_name
    from ..solvers.gdd.dataset import GDDDataset, record, replay

    t0 = time.perf_counter()
    if str(model).lower().endswith(".npz"):
        data = GDDDataset.load(model)
    else:
        n = _records_default() if records is None else records
        data = record(str(model), n, seconds=seconds, progress=progress)
    record_s = time.perf_counter() - t0
    loaded = load_model(data.specs[0].model)
    name = model_name(loaded)
    if str(model) != name:  # a file (a dataset, or a model that may share a bundled model's name)
        name = f"{name} ({Path(model).name})"
    row = {"name": name, "nv": int(loaded.nv), "nu": int(loaded.nu)}
    row.update(replay(data, model=loaded, min_time=min_time, progress=progress, repeats=repeats))
    row["ratio_median"] = row["ratio"]
    sessions = data.info.get("sessions", [])
    row["record_seconds"] = record_s
    row["sessions_fell"] = int(sum(bool(s.get("falls")) for s in sessions))
    row["sessions_succeeded"] = int(sum(bool(s.get("success")) for s in sessions))
    row["paper"] = PAPER.get(model_name(loaded)) if model in PAPER else None
    row["targets"] = {k: (row[key] is not None and row[key] <= bound) for k, (key, bound) in TARGETS.items()}
    return row


def run(models=None, *, min_time: float = 0.2, progress: bool | None = None,
        records: int | None = None, seconds: float | None = None, repeats: int = DEFAULT_REPEATS) -> dict:
    """Run the benchmark on ``models`` (default: humanoid and hand).

    Returns:
      ``{"models": [row, ...], "records": N, "threads": 1, "mujoco_version", "paper"}``;
      each row as :func:`benchmark_model`.
    """
    import mujoco

    from ..model import load_model

    names = list(models) if models else list(DEFAULT_MODELS)
    for name in names:  # fail fast on a bad model before recording anything
        if not str(name).lower().endswith(".npz"):
            m = load_model(name)
            if m.nu == 0:
                raise ParameterError(f"model {name!r} has no actuators: goal-directed dynamics needs "
                                     "at least one controllable actuator")
    repeats = check_repeats(repeats)
    load_start = load_average()
    n = _records_default() if records is None else records
    rows = [benchmark_model(name, records=n, seconds=seconds, min_time=min_time, progress=progress,
                            repeats=repeats) for name in names]
    return {"models": rows, "records": n, "threads": 1, "mujoco_version": mujoco.__version__,
            "paper": PAPER, "repeats": repeats, "loadavg_1min": {"start": load_start, "end": load_average()}}


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def table(result: dict) -> str:
    """The two tables of the seed's section VI for a :func:`run` result."""
    rows = result["models"]
    parts = [f"goal-directed dynamics, one thread, MuJoCo {result['mujoco_version']}: "
             f"records replayed per model: " + ", ".join(f"{r['name']} {r['records']}" for r in rows)]
    # table 1: µs per step
    t1 = []
    for key, label in (("forward_us", "forward"), ("gdd_us", "goal-directed"),
                       ("gdd_forward_us", "goal-directed + forward")):
        row = {"what": label}
        for r in rows:
            paper = (r.get("paper") or {}).get(key)
            row[r["name"]] = f"{r[key]:.1f} (median {r[key.replace('_us', '_median_us')]:.1f})" + (
                f"  [paper {paper}]" if paper is not None else "")
        t1.append(row)
    t1.append({"what": "ratio goal-directed / forward",
               **{r["name"]: f"{r['ratio']:.2f} [{r['ratio_iqr'][0]:.2f}-{r['ratio_iqr'][1]:.2f}]" + ("  [paper %.2f]" % (r["paper"]["gdd_us"] / r["paper"]["forward_us"])
                                                   if r.get("paper") else "") for r in rows}})
    cols = [("what", "CPU time per step (µs, mean)", "{}")] + [(r["name"], r["name"], "{}") for r in rows]
    parts.append(format_table(t1, cols))
    # table 2: statistics
    t2 = []
    for key, label, spec in (("constraints", "constraints", "g"), ("iterations", "iterations", "g"),
                             ("dual_updates", "dual updates", "g"),
                             ("physics_violation", "physics violation [m/s²]", ".1e"),
                             ("residual_gradient", "residual gradient [N]", ".1e")):
        row = {"what": label}
        for r in rows:
            paper = (r.get("paper") or {}).get(key)
            row[r["name"]] = (f"{_fmt(r[f'{key}_median'], spec)} ({_fmt(r[f'{key}_p95'], spec)})"
                              + (f"  [paper {paper}]" if paper else ""))
        t2.append(row)
    cols = [("what", "statistic: median (95th pct)", "{}")] + [(r["name"], r["name"], "{}") for r in rows]
    parts.append(format_table(t2, cols))
    for r in rows:
        missed = [k for k, ok in r["targets"].items() if not ok]
        parts.append(f"{r['name']}: converged {100 * r['converged_fraction']:.1f} %, replay reproduces the "
                     f"recorded accelerations to {r['replay_max_error']:.1e} m/s², sessions with a fall "
                     f"{r['sessions_fell']} of {r.get('sessions', '?')}; targets missed: {', '.join(missed) if missed else 'none'}")
    return "\n".join(parts)


register_benchmark(Benchmark(
    "gdd",
    "goal-directed dynamics: µs per step vs mj_forward and solver statistics (paper tables)",
    run, table, ("records", "repeats")))
