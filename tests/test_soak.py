"""Long-run soaks (issue 26): each planner in closed loop for many simulated minutes, RSS sampled.

The soaks themselves run on demand only (about one wall minute per simulated minute for the
acrobot, less for the others)::

    CONTACTOPT_SOAK_MINUTES=10 python -m pytest -q tests/test_soak.py -p no:cacheprovider -s

Skipped when ``CONTACTOPT_SOAK_MINUTES`` is unset.  Each soak is one row of ``contactopt bench
soak`` (:mod:`contactopt.bench.soak_bench`), run in its own subprocess: the acrobot balancing
under iLQG with a ±3 N push every 30 s, the quadruped walking under IDTO, the humanoid reaching
through the cycled goal sequence under GDD.  Property: no error, the task's success (upright at
the end, walking without a fall, every goal reached without a fall), and the median resident
memory of the last quarter of the run within 5 % of the second quarter's.  (The humanoid-reach
soak was a strict xfail until its session stopped recording every step for the whole run: +24–29 %
before, +0.0 % after; docs/experiments/fuzz-and-soak.md.)

The fast test below runs the bench for 6 simulated seconds and checks its JSON schema.
"""

from __future__ import annotations

import json
import os

import pytest

from contactopt.bench.soak_bench import SOAKS, RssSampler, rss_bytes

MINUTES = os.environ.get("CONTACTOPT_SOAK_MINUTES")

ROW_KEYS = {"soak", "planner", "task", "simulated_s", "wall_s", "success", "rss_start_mb", "rss_end_mb",
            "rss_growth", "rss_growth_raw", "recorded_mb", "load"}


def test_bench_soak_json_schema(capsys):
    from contactopt.cli import main

    assert main(["bench", "soak", "--minutes", "0.1", "--soaks", "acrobot-ilqg", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (row,) = result["rows"]
    assert ROW_KEYS <= set(row)
    assert (row["soak"], row["planner"], row["task"]) == ("acrobot-ilqg", "ilqg", "acrobot")
    assert row["error"] is None, row["error"]
    assert row["simulated_s"] == pytest.approx(6.0, abs=0.01)
    assert row["wall_s"] > 0 and isinstance(row["success"], bool)
    assert 0 < row["rss_start_mb"] and 0 < row["rss_end_mb"] and len(row["rss_samples_mb"]) >= 2
    assert isinstance(row["rss_growth"], float) and isinstance(row["rss_growth_raw"], float)
    # 6 s recorded every 10 ms (t, qpos 2, qvel 2, ctrl 1, metric) plus the update log
    assert 600 * 7 * 8 / 1e6 <= row["recorded_mb"] < 1.0


def test_bench_soak_rejects_unknown_soak():
    from contactopt.cli import main

    assert main(["bench", "soak", "--soaks", "nope"]) != 0


def test_rss_sampler_growth():
    s = RssSampler(period=0.01).start()
    s.stop()
    assert rss_bytes() > 0 and s.samples[0][1] > 0
    s.samples = [(float(k), 100 if k < 8 else 110) for k in range(16)]
    assert s.growth() == pytest.approx(0.10)
    # a run that records 2 bytes per second on purpose and leaks nothing: raw growth, net 0
    s.samples = [(float(k), 1000.0 + 2.0 * k) for k in range(17)]
    assert s.growth() > 0.01
    assert s.growth(recorded_bytes=32.0) == pytest.approx(0.0, abs=1e-12)
    # the same recording plus a 5 % step: the step is what remains
    s.samples = [(float(k), 1000.0 + 2.0 * k + (50.0 if k >= 9 else 0.0)) for k in range(17)]
    assert s.growth(recorded_bytes=32.0) == pytest.approx(0.05)


def test_mpc_result_counts_its_recording():
    import numpy as np

    from contactopt.mpc.runner import MPCResult, UpdateLog, UpdateRecord

    log = UpdateLog([UpdateRecord(0.0, 0.01, 0.001, 1.0, 1, True, {}, "ok")])
    res = MPCResult(np.zeros(10), np.zeros((10, 3)), np.zeros((10, 2)), np.zeros((10, 1)), np.zeros(10),
                    False, None, log, 1.0, 0.1, 0, "sync", 1.0)
    assert res.recorded_bytes() == 8 * (10 + 30 + 20 + 10 + 10) + log.nbytes
    assert log.nbytes >= 8 * len(UpdateLog._COLS) + 8


def test_update_log_is_compact_and_gives_back_the_records():
    """The runner's per-update records (the cause of the acrobot soak's +8.5 %: ~500 B of Python
    objects per update at ~90 updates/s) are kept column-wise: equal records back, < 150 B each."""
    import math
    import tracemalloc

    from contactopt.mpc.runner import UpdateLog, UpdateRecord

    def record(k):
        t = 0.01 * k
        return UpdateRecord(t, None if k % 7 == 0 else t + 0.005, 1e-3 * (k % 5), 1.0 + k, k % 3, k % 7 != 0,
                            {"derivatives": 1e-4 * k, "solve": 2e-4, "line_search": 3e-4}, "SUCCESS")

    odd = UpdateRecord(5.0, 5.1, 0.1, math.inf, 2, True, {"total": 1.0}, "custom breakdown")
    log = UpdateLog([record(k) for k in range(100)] + [odd])
    assert len(log) == 101 and list(log[:100]) == [record(k) for k in range(100)] and log[-1] is odd
    assert log[3] == record(3) and log[7].t_apply is None and not log[7].ok
    assert isinstance(log[1:], UpdateLog) and log[1:][0] == record(1)
    with pytest.raises(IndexError):
        log[101]

    n = 5_000
    records = [record(k) for k in range(n)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        log = UpdateLog()
        for r in records:
            log.append(r)
        per_update = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert per_update < 150, per_update


@pytest.mark.slow
@pytest.mark.skipif(not MINUTES, reason="soak runs on demand: set CONTACTOPT_SOAK_MINUTES")
@pytest.mark.parametrize("name", list(SOAKS))
def test_soak(name):
    from contactopt.bench.soak_bench import run, table

    result = run(minutes=float(MINUTES), soaks=[name])
    print("\n" + table(result))
    (row,) = result["rows"]
    assert row["error"] is None, row["error"]
    assert row["success"], row["detail"]
    assert row["rss_growth"] < 0.05
