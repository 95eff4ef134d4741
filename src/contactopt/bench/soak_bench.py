"""``contactopt bench soak``: long closed-loop runs of each planner with the resident memory sampled.

Each soak runs one planner closed loop for ``--minutes`` simulated minutes (default 10) in its
own Python subprocess, so the resident set size (RSS) of one soak does not carry into the next
and a crash is a reported failure, not a lost benchmark:

* ``acrobot-ilqg``: the acrobot swung up and balanced by iLQG (sync mode, measured lag), a
  ±3 N push on ``lower_arm`` every 30 s; success: the run's success test held, no failure, and
  the tip above 4 m at the end.
* ``quadruped-idto``: the quadruped walking at 0.4 m/s under IDTO MPC; success: the task's
  success (no fall, at least the required metres per 10 s).
* ``humanoid-reach-gdd``: the humanoid reaching with goal-directed dynamics through the
  reaching session's goal sequence, repeated for the whole run; success: the session's success
  (no fall, every goal reached); a fall is reported with its time.

The child first runs the soak for a few unmeasured seconds (:data:`WARMUP_SECONDS`: the compiled
kernels are built then, not mid-run), then samples its RSS every ``period`` seconds
(:class:`RssSampler`) from just before the run to its end; ``rss_growth_raw`` is the median RSS of the last quarter of the samples over the
second quarter's, minus 1 (the first quarter is warm-up: caches, the first recording chunks).
A run records its plant state every 10 ms and every planner update on purpose
(:meth:`~contactopt.mpc.MPCResult.recorded_bytes`, ``recorded_mb``: about 25 MB for the
quadruped's 10 minutes), which grows linearly with its length; ``rss_growth`` is the same ratio
after subtracting that recording from each sample (its size at the end, spread linearly over
the run's wall time), i.e. the growth that would be a leak.  The issue's bound is
``rss_growth < 0.05``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

from ..errors import ParameterError
from . import Benchmark, format_table, register_benchmark
from .timing import load_average

__all__ = ["SOAKS", "RssSampler", "rss_bytes", "run", "run_soak", "table"]

#: soak name → (planner, task)
SOAKS = {
    "acrobot-ilqg": ("ilqg", "acrobot"),
    "quadruped-idto": ("idto", "quadruped"),
    "humanoid-reach-gdd": ("gdd", "humanoid-reach"),
}
GROWTH_LIMIT = 0.05
PUSH_PERIOD = 30.0   # s between the acrobot's pushes
PUSH_FORCE = 3.0     # N, alternating sign


def rss_bytes() -> int:
    """Current resident set size of this process (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class RssSampler:
    """Samples the RSS (and the 1-minute load average) every ``period`` seconds in a daemon
    thread between :meth:`start` and :meth:`stop`; ``samples`` holds ``(perf_counter, rss bytes)``."""

    def __init__(self, period: float = 1.0):
        self.period, self.samples, self.loads = float(period), [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="contactopt-rss", daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), rss_bytes()))
            load = load_average()
            if load is not None:
                self.loads.append(load)
            self._stop.wait(self.period)

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.perf_counter(), rss_bytes()))

    def growth(self, recorded_bytes: float = 0.0) -> float:
        """Relative growth of the median RSS of the last quarter of the samples over the second quarter.

        ``recorded_bytes``: what the run recorded on purpose by its end, assumed to accumulate
        linearly over the sampled wall time; sample ``i`` at time ``t_i`` is first reduced by
        ``recorded_bytes · (t_i − t_0)/(t_end − t_0)`` (0: the raw growth)."""
        t = np.array([s for s, _ in self.samples], dtype=float)
        rss = np.array([r for _, r in self.samples], dtype=float)
        if recorded_bytes and len(t) > 1 and t[-1] > t[0]:
            rss = rss - float(recorded_bytes) * (t - t[0]) / (t[-1] - t[0])
        q = max(1, len(rss) // 4)
        return float(np.median(rss[-q:]) / np.median(rss[q:2 * q]) - 1.0)

    def load(self) -> float | None:
        """Mean 1-minute load average over the samples (None where the OS has none)."""
        return float(np.mean(self.loads)) if self.loads else None


# --------------------------------------------------------------------------- the soaks (child side)


def _acrobot(seconds: float) -> dict:
    import mujoco

    from ..mpc import Push
    from ..planners import run_task
    from ..tasks import load_task
    from ..tasks.acrobot import SUCCESS_HEIGHT, tip_height

    task = load_task("acrobot").task()
    pushes = [Push(float(t), 0.1, "lower_arm", force=(PUSH_FORCE if k % 2 else -PUSH_FORCE, 0.0, 0.0))
              for k, t in enumerate(np.arange(PUSH_PERIOD, seconds - 10.0, PUSH_PERIOD))]

    def soak():
        run = run_task(task, "ilqg", seconds=seconds, pushes=pushes)
        res = run.result
        data = mujoco.MjData(run.plant)
        data.qpos[:] = res.qpos[-1]
        mujoco.mj_kinematics(run.plant, data)
        tip = tip_height(run.plant, data)
        ok = bool(res.success and res.time_of_failure is None and tip > SUCCESS_HEIGHT)
        return {"success": ok, "simulated_s": float(res.simulated_time), "recorded_bytes": res.recorded_bytes(),
                "detail": {"pushes": len(pushes), "final_tip_m": tip, "time_to_success": res.time_to_success,
                           "time_of_failure": res.time_of_failure, "updates": len(res.updates)}}

    return soak


def _quadruped(seconds: float):
    from ..mpc import idto_planner  # noqa: F401  (imported before the first RSS sample)
    from ..tasks import load_task

    from ..tasks.idto_task import run_idto_task

    task = load_task("quadruped").runner("idto").task

    def soak():
        # the runner's closed loop, keeping the MPCResult (its recording's size is subtracted)
        result, plant, x0 = run_idto_task(task, seconds=seconds)
        rep = {**result.summary(), **task.report(task, plant, result, x0)}
        keys = ("metres_walked", "metres_per_10s", "required_metres_per_10s", "falls", "first_fall_s",
                "max_tilt_deg", "time_of_failure", "updates", "failed_updates")
        ok = bool(rep.get("success") and not rep.get("falls") and rep.get("time_of_failure") is None)
        return {"success": ok, "simulated_s": float(rep["simulated_seconds"]),
                "recorded_bytes": result.recorded_bytes(), "detail": {k: rep.get(k) for k in keys}}

    return soak


def _humanoid_reach(seconds: float):
    from ..solvers.gdd import sessions  # noqa: F401  (imported before the first RSS sample)
    from ..tasks import load_task

    runner = load_task("humanoid-reach").runner("gdd")

    def soak():
        rep = runner(seconds=seconds)  # the reaching session's goals, cycled over the whole run
        falls = rep.get("falls") or []
        return {"success": bool(rep.get("success") and not rep.get("fell")),
                "simulated_s": float(rep["seconds"]),
                "detail": {"goals_total": rep.get("goals_total"), "goals_reached": rep.get("goals_reached"),
                           "first_fall_s": falls[0]["time"] if falls else None,
                           "fall_body": falls[0]["body"] if falls else None, "error": rep.get("error")}}

    return soak


_SOAK_FACTORIES = {"acrobot-ilqg": _acrobot, "quadruped-idto": _quadruped, "humanoid-reach-gdd": _humanoid_reach}


#: simulated seconds of the warm-up run before a soak is measured
WARMUP_SECONDS = 3.0


def run_soak(name: str, seconds: float, period: float = 1.0) -> dict:
    """Run soak ``name`` for ``seconds`` simulated seconds in this process: one row of :func:`run`.

    A :data:`WARMUP_SECONDS` run of the same soak comes first, unmeasured: with a cold numba cache
    (a fresh clone) the compiled kernels are built on first use, and LLVM's memory during a build
    mid-run read as growth (+53 % for the GDD soak in a fresh clone, +0.00 % with a warm cache).
    """
    planner, task = SOAKS[name]
    _SOAK_FACTORIES[name](WARMUP_SECONDS)()  # compiles what the soak runs
    soak = _SOAK_FACTORIES[name](seconds)  # imports and task building happen before the first sample
    sampler = RssSampler(period).start()
    t0 = time.perf_counter()
    error = None
    try:
        out = soak()
    except Exception as exc:  # noqa: BLE001  (a raised error is a failed soak, reported with its message)
        out = {"success": False, "simulated_s": None, "detail": {}}
        error = f"{type(exc).__name__}: {exc}"
    finally:
        wall = time.perf_counter() - t0
        sampler.stop()
    rss = [r for _, r in sampler.samples]
    recorded = out.get("recorded_bytes")
    return {"soak": name, "planner": planner, "task": task, "simulated_s": out["simulated_s"], "wall_s": wall,
            "success": out["success"], "rss_start_mb": rss[0] / 1e6, "rss_end_mb": rss[-1] / 1e6,
            "rss_growth": sampler.growth(recorded or 0.0), "rss_growth_raw": sampler.growth(),
            "recorded_mb": None if recorded is None else recorded / 1e6,
            "load": sampler.load(), "error": error, "detail": out["detail"],
            "rss_samples_mb": [round(r / 1e6, 2) for r in rss]}


# --------------------------------------------------------------------------- the bench (parent side)


def parse_soaks(soaks) -> list[str]:
    """``soaks`` (None, a comma-separated string or a list of them) as known soak names."""
    if soaks is None:
        return list(SOAKS)
    items = [soaks] if isinstance(soaks, str) else list(soaks)
    names = [s.strip() for item in items for s in str(item).split(",") if s.strip()]
    for n in names:
        if n not in SOAKS:
            raise ParameterError(f"unknown soak {n!r} (available: {', '.join(SOAKS)})")
    if not names:
        raise ParameterError("--soaks names no soak")
    return names


def _child(name: str, seconds: float, timeout: float) -> dict:
    planner, task = SOAKS[name]
    cmd = [sys.executable, "-m", "contactopt.bench.soak_bench", name, repr(float(seconds))]
    t0 = time.perf_counter()
    load0 = load_average()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        proc, error = None, f"timed out after {timeout:.0f} s"
    if proc is not None:
        for line in reversed(proc.stdout.splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except json.JSONDecodeError:
                    break
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        error = f"exit status {proc.returncode}: {tail}"
    return {"soak": name, "planner": planner, "task": task, "simulated_s": None,
            "wall_s": time.perf_counter() - t0, "success": False, "rss_start_mb": None, "rss_end_mb": None,
            "rss_growth": None, "rss_growth_raw": None, "recorded_mb": None, "load": load0, "error": error,
            "detail": {}, "rss_samples_mb": []}


def run(models=None, *, min_time: float = 0.2, minutes: float = 10.0, soaks=None) -> dict:
    """Run the soaks, each in its own subprocess.

    Args:
      models: unused (``--model`` does not apply).
      min_time: unused.
      minutes: simulated minutes per soak (> 0; default 10).
      soaks: names (comma-separated or a list; default all of :data:`SOAKS`).

    Returns:
      ``{"rows": [{"soak", "planner", "task", "simulated_s", "wall_s", "success", "rss_start_mb",
      "rss_end_mb", "rss_growth", "rss_growth_raw", "recorded_mb", "load", "error", "detail",
      "rss_samples_mb"}], "minutes", "growth_limit"}`` (``rss_growth`` net of the recording, see
      the module docstring; ``recorded_mb`` None where the soak has no MPC recording); ``load`` is the mean 1-minute load average during the soak, ``error``
      None or why it failed, ``detail`` the task's own figures (pushes, metres walked, goals
      reached, time of the first fall, ...), ``rss_samples_mb`` the sampled RSS series
      (every second, or every ``seconds / 200`` for short soaks).
    """
    if models:
        raise ParameterError("bench soak takes no --model (use --soaks)")
    minutes = float(minutes)
    if not (np.isfinite(minutes) and 0 < minutes <= 24 * 60):
        raise ParameterError(f"--minutes must be in (0, 1440], got {minutes:g}")
    names = parse_soaks(soaks)
    seconds = 60.0 * minutes
    rows = []
    for name in names:
        rows.append(_child(name, seconds, timeout=120.0 + 20.0 * seconds))
    return {"rows": rows, "minutes": minutes, "growth_limit": GROWTH_LIMIT}


def table(result: dict) -> str:
    """One line per soak: simulated and wall seconds, success, RSS start → end, growth, load."""
    rows = []
    for r in result["rows"]:
        ok = "yes" if r["success"] else "NO"
        d = r.get("detail") or {}
        if not r["success"]:
            why = r.get("error") or (f"fell at {d['first_fall_s']:g} s" if d.get("first_fall_s") is not None
                                     else "task failed")
            ok += f" ({why})"
        growth, raw = r.get("rss_growth"), r.get("rss_growth_raw")
        flag = "" if growth is None or growth < result.get("growth_limit", GROWTH_LIMIT) else " !"
        rows.append(dict(r, ok=ok, growth_pct=None if growth is None else f"{100 * growth:+.2f} %{flag}",
                         raw_pct=None if raw is None else f"{100 * raw:+.2f} %"))
    return (format_table(rows, [("soak", "soak", "{}"), ("simulated_s", "simulated s", "{:.0f}"),
                                ("wall_s", "wall s", "{:.0f}"), ("rss_start_mb", "RSS start MB", "{:.0f}"),
                                ("rss_end_mb", "RSS end MB", "{:.0f}"), ("recorded_mb", "recorded MB", "{:.1f}"),
                                ("raw_pct", "raw growth", "{}"), ("growth_pct", "growth", "{}"),
                                ("load", "load", "{:.2f}"), ("ok", "success", "{}")])
            + f"\ngrowth: median RSS of the last quarter over the second quarter, after subtracting what the "
              f"run recorded on purpose (limit {100 * result.get('growth_limit', GROWTH_LIMIT):.0f} %); "
              "raw growth: without subtracting it; each soak in its own process")


register_benchmark(Benchmark("soak", "each planner closed loop for minutes, RSS sampled (growth < 5 %, no failure)",
                             run, table, ("minutes", "soaks")))


def _main(argv) -> int:
    """Child entry: ``python -m contactopt.bench.soak_bench NAME SECONDS`` prints the row as JSON."""
    name, seconds = argv[0], float(argv[1])
    period = min(1.0, max(0.1, seconds / 200.0))
    print(json.dumps(run_soak(name, seconds, period=period)), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main(sys.argv[1:]))
