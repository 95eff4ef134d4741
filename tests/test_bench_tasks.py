"""``contactopt bench tasks``: seed ranges, pair selection, failure kinds, JSON rows, the load process."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contactopt.bench import tasks_bench
from contactopt.errors import ContactoptError, ParameterError

ROOT = Path(__file__).resolve().parents[1]
PENDULUM = str(ROOT / "examples" / "pendulum" / "pendulum_task.py")
ROW_KEYS = {"task", "planner", "seeds", "successes", "success_rate", "time_to_success_median",
            "update_ms_median", "failures", "failed_seeds"}


def test_seed_ranges():
    assert tasks_bench.parse_seed_range("0:32") == range(0, 32)
    assert tasks_bench.parse_seed_range("1000:1032") == range(1000, 1032)
    assert tasks_bench.parse_seed_range("5") == range(0, 5)
    assert tasks_bench.parse_seed_range(3) == range(0, 3)
    for bad in ("x", "3:1", "0:0", "-2:4", "1:2:3", ""):
        with pytest.raises(ParameterError, match="--seeds"):
            tasks_bench.parse_seed_range(bad)


def test_pairs_follow_the_registry(monkeypatch):
    all_pairs = tasks_bench.pairs()
    assert ("acrobot", "ilqg") in all_pairs and ("acrobot", "idto") in all_pairs
    assert ("humanoid-reach", "gdd") in all_pairs
    assert tasks_bench.pairs(["acrobot"], "idto") == [("acrobot", "idto")]
    assert tasks_bench.pairs([PENDULUM]) == [(PENDULUM, p) for p in tasks_bench.FILE_PLANNERS]
    with pytest.raises(ContactoptError, match="unknown task"):
        tasks_bench.pairs(["no-such-task"])
    with pytest.raises(ContactoptError, match="gdd"):  # an unknown planner lists the valid ones
        tasks_bench.pairs(["acrobot"], "no-such-planner")
    with pytest.raises(ParameterError, match="no task file"):
        tasks_bench.pairs(["missing/task.py"])
    # task:NAME — the bundled task's planner-independent form, even where it has its own runner
    assert tasks_bench.pairs(["task:spinner"], "idto") == [("task:spinner", "idto")]
    assert tasks_bench.pairs(["task:spinner"]) == [("task:spinner", p) for p in tasks_bench.FILE_PLANNERS]
    runner, task = tasks_bench.resolve_pair("task:spinner", "idto")
    assert runner is None and task.name == "spinner"
    assert tasks_bench.resolve_pair("spinner", "idto")[0] is not None  # its tuned runner
    assert tasks_bench.pairs(["task:hand-reach"], "gdd") == [("task:hand-reach", "gdd")]  # a GDD form
    import contactopt.tasks as registry

    registry.available_tasks()
    monkeypatch.setitem(registry._TASKS, "formless", registry.TaskSpec("formless", "hand", "a runner only",
                                                                       {"gdd": lambda **_: {}}))
    with pytest.raises(ParameterError, match="task 'formless' has no planner-independent form"):
        tasks_bench.pairs(["task:formless"])


def test_a_refusing_planner_is_a_counted_error_not_a_crash():
    """GDD refuses the torque-limited pendulum before the run: every seed counts as that error."""
    row = tasks_bench.run_pair(PENDULUM, "gdd", range(0, 2))
    assert ROW_KEYS <= set(row)
    assert row["successes"] == 0 and row["success_rate"] == 0.0
    (kind, n), = row["failures"].items()
    assert n == 2 and kind.startswith("error: ") and "actuator" in kind
    assert row["failed_seeds"] == {kind: [0, 1]}  # which seeds, by the same kind


def test_busy_core_runs_and_stops():
    import multiprocessing

    before = len(multiprocessing.active_children())
    with tasks_bench.busy_core(True):
        time.sleep(0.3)
        assert len(multiprocessing.active_children()) == before + 1
    assert len(multiprocessing.active_children()) == before


def test_the_load_process_does_not_outlive_a_killed_bench():
    """A bench killed by a signal runs no ``finally``: its spinner must notice and stop (one stayed
    at 90 % CPU for 10 minutes after a ``bench tasks --load`` was killed)."""
    code = ("import os, signal, time; from contactopt.bench import tasks_bench\n"
            "with tasks_bench.busy_core(True) as p:\n"
            "    time.sleep(0.5); print(p.pid, flush=True); os.kill(os.getpid(), signal.SIGKILL)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    pid = int(out.stdout.split()[0])

    def running():
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().split(")")[-1].split()[0] not in ("Z", "X")  # a zombie has stopped
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10.0
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    stopped = not running()
    if not stopped:
        os.kill(pid, 9)
    assert stopped


def test_cli_errors_are_one_line():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "contactopt", "bench", *args], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})

    for args, needle in ((("tasks", "--seeds", "9:3"), "--seeds"), (("sweep", "--seeds", "3:5"), "a count"),
                         (("tasks", "--tasks", "nope"), "unknown task"), (("contact", "--load"), "--load"),
                         (("tasks", "--async", "--lag", "0.01"), "--async"), (("contact", "--async"), "--async")):
        p = run(*args)
        assert p.returncode == 1, (args, p.stderr)
        assert p.stderr.startswith("contactopt: error: ") and needle in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_json_rows_of_a_closed_loop_pair(tmp_path):
    """The pendulum with iLQG over two seeds: JSON rows with every key, and the plot."""
    out = tmp_path / "tasks.json"
    p = subprocess.run([sys.executable, "-m", "contactopt", "bench", "tasks", "--tasks", PENDULUM, "--planner",
                        "ilqg", "--seeds", "0:2", "--json", "--out", str(out), "--plots", str(tmp_path)],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert p.returncode == 0, p.stderr
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert ROW_KEYS <= set(row) and row["seeds"] == "0:2" and row["planner"] == "ilqg"
    assert row["successes"] + sum(row["failures"].values()) == 2
    assert row["update_ms_median"] > 0 and result["load"] == "none"
    assert (tmp_path / "tasks.png").stat().st_size > 1000


@pytest.mark.realtime
@pytest.mark.slow
def test_async_rows_run_in_real_time():
    """``--async``: the pendulum task file with iLQG over two seeds, planner and plant in their own
    threads; the row says so and gives the real-time factor the runs kept."""
    result = tasks_bench.run(seeds="0:2", tasks=[PENDULUM], planner="ilqg", asynchronous=True, progress=False)
    (row,) = result["rows"]
    assert row["mode"] == "async"
    assert row["successes"] + sum(row["failures"].values()) == 2
    assert not any(k.startswith("error") for k in row["failures"]), row["failures"]
    assert 0 < row["realtime_factor_median"] <= 1.1
    # a GDD reaching task's scripted runner has no async mode: its task form runs instead
    runner = tasks_bench._runner("hand-reach", "gdd", asynchronous=True)
    assert callable(runner)


def test_calibrated_lag_rounds_up_and_is_cached(tmp_path):
    from contactopt.mpc.calibration import LAG_GRID, calibrated_lag

    calls = []

    def measure():
        calls.append(1)
        return {"policy_lag_ms": 12.3}

    path = tmp_path / "lag.json"
    lag, cached = calibrated_lag("t", "ilqg", 1.0, measure, path=path)
    assert not cached and lag == pytest.approx(0.013) and lag >= 0.0123
    assert abs(lag / LAG_GRID - round(lag / LAG_GRID)) < 1e-9
    lag2, cached2 = calibrated_lag("t", "ilqg", 1.0, measure, path=path)
    assert cached2 and lag2 == lag and len(calls) == 1
    lag3, cached3 = calibrated_lag("t", "ilqg", 2.0, measure, path=path)  # another slowdown: another key
    assert not cached3 and len(calls) == 2
    path.write_text("not json")  # a damaged cache is recalibrated, not an error
    assert calibrated_lag("t", "ilqg", 1.0, measure, path=path) == (lag, False)
    with pytest.raises(ContactoptError, match="measured no lag"):
        calibrated_lag("u", "ilqg", 1.0, lambda: {"policy_lag_ms": None}, path=path)


def test_calibrated_lag_is_measured_again_for_other_options_or_other_code(tmp_path, monkeypatch):
    """A planner setting or a change to the library can change the update time: the cache key
    holds the run's options and the source's fingerprint, and a new fingerprint drops the
    pair's stale values."""
    from contactopt.mpc import calibration

    lags = iter([12.3, 4.1, 7.7, 2.2])
    calls = []

    def measure():
        calls.append(1)
        return {"policy_lag_ms": next(lags)}

    path = tmp_path / "lag.json"
    base = {"settings": {"horizon": 100}, "mode": "sync"}
    assert calibration.calibrated_lag("t", "ilqg", 1.0, measure, path=path, options=base) == (0.013, False)
    assert calibration.calibrated_lag("t", "ilqg", 1.0, measure, path=path,
                                      options=dict(base)) == (0.013, True)
    other = {"settings": {"horizon": 300}, "mode": "sync"}
    assert calibration.calibrated_lag("t", "ilqg", 1.0, measure, path=path, options=other) == (0.005, False)
    assert calibration.calibrated_lag("u", "ilqg", 1.0, measure, path=path, options=base) == (0.008, False)
    assert len(calls) == 3 and len(json.loads(path.read_text())) == 3
    code = calibration.code_fingerprint()
    assert len(code) == 12 and code == calibration.code_fingerprint()
    monkeypatch.setattr(calibration, "code_fingerprint", lambda: "0123456789ab")
    assert calibration.calibrated_lag("t", "ilqg", 1.0, measure, path=path, options=base) == (0.003, False)
    table = json.loads(path.read_text())
    # task t's two values of the old code are gone; task u's stays until u is calibrated again
    assert sorted(k.split("|")[0] for k in table) == ["t", "u"]
    assert any("code=0123456789ab" in k for k in table)


def test_deterministic_flag_conflicts_are_one_line():
    p = subprocess.run([sys.executable, "-m", "contactopt", "run", PENDULUM, "--deterministic", "--lag", "0.01"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert p.returncode == 1 and "--deterministic" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_deterministic_runs_repeat_exactly(tmp_path):
    """Two ``--deterministic`` runs of one seed (measured-lag planner) give the same trajectory."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "XDG_CACHE_HOME": str(tmp_path)}
    reports = []
    for i in range(2):
        out = tmp_path / f"run{i}.npz"
        p = subprocess.run([sys.executable, "-m", "contactopt", "run", PENDULUM, "--seconds", "2", "--deterministic",
                            "--json", "--save-trajectory", str(out)], capture_output=True, text=True, timeout=300,
                           env=env)
        assert p.returncode in (0, 3), p.stderr
        reports.append(json.loads(p.stdout))
    assert reports[0]["lag_s"] == reports[1]["lag_s"] > 0
    assert reports[1]["lag_source"].endswith("(cached)")
    import numpy as np

    a, b = np.load(tmp_path / "run0.npz"), np.load(tmp_path / "run1.npz")
    assert np.array_equal(a["qpos"], b["qpos"]) and np.array_equal(a["ctrl"], b["ctrl"])
