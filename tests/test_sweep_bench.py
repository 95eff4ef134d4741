"""``bench tasks`` on the sweep engine: ``--workers 2`` gives the rows of the serial default."""

from pathlib import Path

from contactopt.bench import tasks_bench
from contactopt.cli import main

ROOT = Path(__file__).resolve().parents[1]
PENDULUM = str(ROOT / "examples" / "pendulum" / "pendulum_task.py")


def test_bench_tasks_rows_are_the_same_on_two_workers():
    """A fixed lag makes each run deterministic: the rows agree except for wall times (update ms, wall_s)."""
    rows = [tasks_bench.run(tasks=[PENDULUM], planner="ilqg", seeds="0:2", lag=0.02, workers=w)["rows"]
            for w in (1, 2)]
    strip = [[{k: v for k, v in r.items() if k not in ("wall_s", "update_ms_median")} for r in rs] for rs in rows]
    assert strip[0] == strip[1]
    (row,) = rows[0]
    assert row["successes"] + sum(row["failures"].values()) == 2 and row["mode"] == "sync fixed lag"


def test_bench_workers_applies_to_bench_tasks_only(capsys):
    assert main(["bench", "contact", "--workers", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("contactopt: error: ") and "--workers" in err and err.count("\n") == 1
