"""Long-run soak (issue 26): a planner in closed loop for many simulated minutes, RSS sampled.

On demand only (it runs about one wall minute per simulated minute)::

    CONTACTOPT_SOAK_MINUTES=10 python -m pytest -q tests/test_soak.py -p no:cacheprovider -s

Skipped when ``CONTACTOPT_SOAK_MINUTES`` is unset.  Covered so far: the acrobot balancing under
iLQG with a push every 30 s.  Property: no error, the acrobot upright at the end, and the
resident memory of the last quarter of the run within 5 % of the second quarter's (a leak in
the planner, the recorders or MuJoCo data shows as growth; the chunked recorders grow by
~100 kB per simulated minute here).
"""

from __future__ import annotations

import os
import threading
import time

import mujoco
import numpy as np
import pytest

MINUTES = os.environ.get("CONTACTOPT_SOAK_MINUTES")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not MINUTES, reason="soak runs on demand: set CONTACTOPT_SOAK_MINUTES"),
]


def _rss_bytes() -> int:
    """Current resident set size of this process (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class RssSampler:
    """Samples the RSS every ``period`` seconds in a daemon thread between ``start`` and ``stop``."""

    def __init__(self, period: float = 1.0):
        self.period, self.samples = period, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), _rss_bytes()))
            self._stop.wait(self.period)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.samples.append((time.perf_counter(), _rss_bytes()))

    def growth(self) -> float:
        """Relative growth of the median RSS of the last quarter of the samples over the second quarter."""
        rss = np.array([r for _, r in self.samples], dtype=float)
        q = max(1, len(rss) // 4)
        return float(np.median(rss[-q:]) / np.median(rss[q:2 * q]) - 1.0)


@pytest.mark.xfail(float(MINUTES or 0) >= 10, strict=True, reason=(
    "2026-11-26: over 10 simulated minutes the RSS grows 190 → 308 MB, +8.5 % last quarter over the "
    "second; the Python heap grows ~10 kB/s (tracemalloc), so the growth is native (MuJoCo data, "
    "thread pools or allocator fragmentation): not found yet (docs/experiments/fuzz-and-soak.md)"))
def test_acrobot_ilqg_balance_soak():
    from contactopt.mpc import Push
    from contactopt.planners import run_task
    from contactopt.tasks import load_task
    from contactopt.tasks.acrobot import SUCCESS_HEIGHT, tip_height

    seconds = 60.0 * float(MINUTES)
    task = load_task("acrobot").task()
    pushes = [Push(t, 0.1, "lower_arm", force=(3.0 if k % 2 else -3.0, 0.0, 0.0))
              for k, t in enumerate(np.arange(30.0, seconds - 10.0, 30.0))]
    sampler = RssSampler().start()
    try:
        run = run_task(task, "ilqg", seconds=seconds, pushes=pushes)
    finally:
        sampler.stop()
    res = run.result
    plant = run.plant if isinstance(run.plant, mujoco.MjModel) else task.load_plant()
    data = mujoco.MjData(plant)
    data.qpos[:] = res.qpos[-1]
    mujoco.mj_kinematics(plant, data)
    growth = sampler.growth()
    print(f"\nsoak acrobot/ilqg: {seconds:g} s simulated, {len(pushes)} pushes, success {res.success}, "
          f"final tip {tip_height(plant, data):.2f} m, RSS {sampler.samples[0][1] / 1e6:.0f} → "
          f"{sampler.samples[-1][1] / 1e6:.0f} MB, growth (last vs 2nd quarter) {100 * growth:+.2f} %")
    assert res.time_of_failure is None and res.success
    assert tip_height(plant, data) > SUCCESS_HEIGHT
    assert growth < 0.05
