"""``contactopt optimize TASK --seeds A:B``: offline IDTO solves from many initial states on the
sweep engine (local process pool; Ray in tests/test_sweep_ray.py)."""

import json
from pathlib import Path

import numpy as np
import pytest

from contactopt.cli import main
from contactopt.offline import (OfflineUnit, build_offline_problem, optimize_offline, plan_offline_units,
                                run_offline_unit)
from contactopt.sweep import read_rows

ROOT = Path(__file__).resolve().parents[1]
PENDULUM = str(ROOT / "examples" / "pendulum" / "pendulum_task.py")
ITERATIONS = 4


def test_dataset_on_two_workers_matches_serial_solves_and_resumes(tmp_path, capsys):
    out, traj = tmp_path / "d.jsonl", tmp_path / "traj"
    traj.mkdir()
    argv = ["optimize", PENDULUM, "--backend", "compliant", "--iterations", str(ITERATIONS), "--out", str(out),
            "--workers", "2", "--json"]
    assert main([*argv, "--seeds", "0:2", "--save-trajectories", str(traj)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["ran"] == 2 and info["skipped"] == 0 and info["finite"] == 2 and info["engine"] == "local"
    rows = read_rows(out)
    assert [r["seed"] for r in rows] == [0, 1] and len({r["id"] for r in rows}) == 2
    assert len({r["worker"] for r in rows}) >= 1 and all(r["error"] is None for r in rows)
    for row in rows:
        # the worker's solve is the serial solve of that seed, to the bit (single-threaded, deterministic)
        op = build_offline_problem(PENDULUM, backend="compliant", seed=row["seed"])
        try:
            result, _ = optimize_offline(op, iterations=ITERATIONS)
        finally:
            op.problem.close()
        assert row["cost"] == float(result.cost) and row["iterations"] == result.iterations
        z = np.load(row["trajectory"])
        assert np.array_equal(z["qpos"], result.q) and np.array_equal(z["x0"], op.x0)
        T = result.q.shape[0] - 1
        assert z["tau"].shape == (T, op.plant.nv) and z["ctrl"].shape == (T, op.plant.nu)
        assert z["time"][-1] == pytest.approx(T * op.problem.h)
        assert z["cost_log"][-1] == row["cost"] and z["playback_qpos"].shape[1] == op.plant.nq
    # one more seed: only it runs; each unit stays in the file once
    assert main([*argv, "--seeds", "0:3", "--save-trajectories", str(traj)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["skipped"] == 2 and info["ran"] == 1 and info["solves"] == 3
    lines = out.read_text().splitlines()
    assert len(lines) == 3 and len({json.loads(x)["id"] for x in lines}) == 3


def test_a_unit_that_raises_is_a_row_with_its_error():
    row = run_offline_unit(OfflineUnit("no-such-task", 0))
    assert row["error"].startswith("error: unknown task 'no-such-task'") and row["success"] is False


def test_units_name_the_task_by_reference_and_hash_what_decides_the_outcome():
    a = plan_offline_units(PENDULUM, range(2), backend="compliant", iterations=3)
    b = plan_offline_units(PENDULUM, range(2), backend="compliant", iterations=4)
    assert Path(a[0].task).is_absolute() and a[0].id != a[1].id and a[0].id != b[0].id
    assert a[0].id == plan_offline_units(PENDULUM, [0], backend="compliant", iterations=3)[0].id


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    cases = [(["--seeds", "3:3", "--out", str(out)], "--seeds"),
             (["--seeds", "0:2", "--out", str(tmp_path / "no" / "o.jsonl")], "does not exist"),
             (["--seeds", "0:2"], "needs --out"),
             (["--out", str(out)], "add --seeds"),
             (["--seeds", "0:2", "--out", str(out), "--address", "127.0.0.1:1"], "add --ray"),
             (["--seeds", "0:2", "--out", str(out), "--save-trajectories", str(tmp_path / "nope")], "does not exist"),
             (["--seeds", "0:2", "--out", str(out), "--video", str(tmp_path / "v.mp4")], "--save-trajectories"),
             (["--seeds", "0:2", "--out", str(out), "--seed", "3"], "give the range only")]
    for extra, needle in cases:
        assert main(["optimize", PENDULUM, *extra]) == 1, extra
        err = capsys.readouterr().err
        assert err.startswith("contactopt: error: ") and needle in err and err.count("\n") == 1, (extra, err)
        assert list(tmp_path.iterdir()) == []
    assert main(["optimize", "hand-reach", "--seeds", "0:2", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "planner 'idto' cannot run task hand-reach" in err and err.count("\n") == 1 and not out.exists()
