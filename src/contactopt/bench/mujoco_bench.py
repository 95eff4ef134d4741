"""``contactopt bench mujoco``: MuJoCo's own speed on each model — the yardstick.

For each model (all bundled models, or ``--model PATH``), from a state reached by
0.25 s of passive simulation from the ``home`` keyframe (so contacts are active):

* ``step_per_s``, ``forward_per_s``, ``inverse_per_s``: calls per second of
  ``mj_step``, ``mj_forward`` and ``mj_inverse`` issued from Python;
* ``transition_fd_ms``: milliseconds per ``mjd_transitionFD`` (forward differences,
  A and B matrices);
* ``inverse_fd_ms``: milliseconds per ``mjd_inverseFD`` (∂τ/∂q, ∂τ/∂v, ∂τ/∂a).

Each model gets a row with ``threads = 1`` and a row with ``threads = os.cpu_count()``,
where the rates are the aggregate throughput of that many Python threads, each with
its own ``MjData`` (MuJoCo releases the GIL inside these calls), and the milliseconds
are wall time divided by the number of calls completed.
"""

from __future__ import annotations

import os
import threading
import time

import mujoco
import numpy as np

from ..model import load_model, model_name, planner_model_copy, reset_to_keyframe
from ..models import BUNDLED_MODELS
from ..progress import progress_bar
from . import Benchmark, format_table, register_benchmark, time_per_call

__all__ = ["benchmark_model", "run"]

FD_EPS = 1e-6


def _prepared_data(model: mujoco.MjModel) -> mujoco.MjData:
    data = mujoco.MjData(model)
    reset_to_keyframe(model, data, "home")
    for _ in range(int(round(0.25 / model.opt.timestep))):
        mujoco.mj_step(model, data)
    mujoco.mj_forward(model, data)
    return data


def _calls(model: mujoco.MjModel, data: mujoco.MjData) -> dict:
    """Closures for each timed call, operating on ``data`` (one set per thread)."""
    nv, nu, na = model.nv, model.nu, model.na
    A = np.zeros((2 * nv + na, 2 * nv + na))
    B = np.zeros((2 * nv + na, nu))
    DfDq, DfDv, DfDa = (np.zeros((nv, nv)) for _ in range(3))
    step_data = mujoco.MjData(model)
    mujoco.mj_copyData(step_data, model, data)
    inv_data = mujoco.MjData(model)
    mujoco.mj_copyData(inv_data, model, data)
    return {
        "step": lambda: mujoco.mj_step(model, step_data),
        "forward": lambda: mujoco.mj_forward(model, data),
        "inverse": lambda: mujoco.mj_inverse(model, inv_data),
        "transition_fd": lambda: mujoco.mjd_transitionFD(model, data, FD_EPS, False, A, B, None, None),
        "inverse_fd": lambda: mujoco.mjd_inverseFD(
            model, inv_data, FD_EPS, False, DfDq, DfDv, DfDa, None, None, None, None),
    }


def _threaded_time_per_call(model, data, key, threads, min_time):
    """Aggregate seconds per call with ``threads`` threads each running ``key`` on its own data."""
    per_thread = []
    for _ in range(threads):
        d = mujoco.MjData(model)
        mujoco.mj_copyData(d, model, data)
        per_thread.append(_calls(model, d)[key])
    single = time_per_call(per_thread[0], min_time=min_time / 3, repeats=1)
    n = max(4, int(min_time / max(single, 1e-7)))
    barrier = threading.Barrier(threads + 1)

    def worker(fn):
        barrier.wait()
        for _ in range(n):
            fn()

    pool = [threading.Thread(target=worker, args=(fn,)) for fn in per_thread]
    for th in pool:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in pool:
        th.join()
    return (time.perf_counter() - t0) / (n * threads)


def benchmark_model(model: mujoco.MjModel, *, threads: int = 1, min_time: float = 0.2) -> dict:
    """One result row for ``model``.

    Returns:
      ``{"name", "nv", "step_per_s", "forward_per_s", "inverse_per_s",
      "transition_fd_ms", "inverse_fd_ms", "threads"}``; the derivative rows of an RK4 model are
      timed on its planner copy (:func:`contactopt.model.planner_model_copy`).
    """
    data = _prepared_data(model)
    # MuJoCo's derivatives reject RK4 with a fatal error; they are timed on the copy planners use
    fd_model = planner_model_copy(model, notice=False)
    fd_data = data if fd_model.opt.integrator == model.opt.integrator else _prepared_data(fd_model)
    seconds = {}
    for key in ("step", "forward", "inverse", "transition_fd", "inverse_fd"):
        m, d = (fd_model, fd_data) if key.endswith("_fd") else (model, data)
        if threads == 1:
            seconds[key] = time_per_call(_calls(m, d)[key], min_time=min_time)
        else:
            seconds[key] = _threaded_time_per_call(m, d, key, threads, min_time)
    return {
        "name": model_name(model),
        "nv": int(model.nv),
        "step_per_s": 1.0 / seconds["step"],
        "forward_per_s": 1.0 / seconds["forward"],
        "inverse_per_s": 1.0 / seconds["inverse"],
        "transition_fd_ms": 1e3 * seconds["transition_fd"],
        "inverse_fd_ms": 1e3 * seconds["inverse_fd"],
        "threads": int(threads),
    }


def run(models=None, *, min_time: float = 0.2, progress: bool | None = None) -> dict:
    """Run the benchmark on ``models`` (names/paths; default: every bundled model).

    Returns:
      ``{"models": [row, ...], "cpu_count": int, "mujoco_version": str}`` with one row per
      model and thread count (1 and ``os.cpu_count()``).
    """
    names = list(models) if models else list(BUNDLED_MODELS)
    loaded = [load_model(n) for n in names]  # fail fast on a bad model before timing anything
    ncpu = os.cpu_count() or 1
    thread_counts = [1] if ncpu == 1 else [1, ncpu]
    rows = []
    with progress_bar(total=len(loaded) * len(thread_counts), desc="bench mujoco", unit="run",
                      enable=progress) as bar:
        for model in loaded:
            for threads in thread_counts:
                rows.append(benchmark_model(model, threads=threads, min_time=min_time))
                bar.update(1)
    return {"models": rows, "cpu_count": ncpu, "mujoco_version": mujoco.__version__}


def table(result: dict) -> str:
    """Readable table of a :func:`run` result."""
    cols = [
        ("name", "model", "{}"),
        ("nv", "nv", "{}"),
        ("threads", "threads", "{}"),
        ("step_per_s", "mj_step/s", "{:,.0f}"),
        ("forward_per_s", "mj_forward/s", "{:,.0f}"),
        ("inverse_per_s", "mj_inverse/s", "{:,.0f}"),
        ("transition_fd_ms", "transitionFD ms", "{:.3f}"),
        ("inverse_fd_ms", "inverseFD ms", "{:.3f}"),
    ]
    head = f"MuJoCo {result['mujoco_version']} on {result['cpu_count']} cores (rates from Python calls)\n"
    return head + format_table(result["models"], cols)


register_benchmark(Benchmark(
    "mujoco",
    "mj_step/mj_forward/mj_inverse rates and FD derivative times per model (the yardstick)",
    run, table))
