"""``contactopt sweep`` on the local engines: units, output file, resume, worker death, bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contactopt.cli import main
from contactopt.errors import ContactoptError, ParameterError
from contactopt.sweep import (
    InlineEngine,
    LocalPoolEngine,
    Lost,
    SweepOutput,
    parse_grid,
    plan_sweep,
    read_rows,
    run_unit,
)
from contactopt.sweep.units import CRASH_ONCE_ENV

ROOT = Path(__file__).resolve().parents[1]
PENDULUM = str(ROOT / "examples" / "pendulum" / "pendulum_task.py")
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
ROW_KEYS = {"id", "task", "planner", "seed", "grid", "seconds", "lag", "success", "time_to_success", "metric",
            "update_ms_median", "policy_lag_ms", "failure", "wall_s", "worker", "node", "attempts"}


def _sweep(*args, env=ENV, timeout=300):
    return subprocess.run([sys.executable, "-m", "contactopt", "sweep", PENDULUM, *args], capture_output=True,
                          text=True, timeout=timeout, env=env, check=False)


def test_plan_units_ids_and_typed_grid():
    plan = plan_sweep(PENDULUM, seeds=range(2), grid=parse_grid(["horizon=0.5,0.8", "weight.qpos=1,10"]),
                      seconds=0.3, lag=0.02)
    assert len(plan.units) == 8 and plan.planner == "ilqg"
    assert plan.axes == (("horizon", (0.5, 0.8)), ("weight.qpos", (1.0, 10.0)))
    ids = [u.id for u in plan.units]
    assert len(set(ids)) == 8 and all(len(i) == 16 for i in ids)
    again = plan_sweep(PENDULUM, seeds=range(2), grid=parse_grid(["weight.qpos=1.0,10", "horizon=.5,0.80"]),
                       seconds=0.3, lag=0.02)
    assert {u.id for u in again.units} == set(ids)  # the id is the run, not the spelling or axis order
    other = plan_sweep(PENDULUM, seeds=range(1), seconds=0.4, lag=0.02)
    assert other.units[0].id not in ids


def test_bad_grids_and_ranges(monkeypatch):
    with pytest.raises(ParameterError, match="valid: horizon.*weight.qpos"):
        plan_sweep(PENDULUM, seeds=range(2), grid=parse_grid(["nope=1,2"]))
    with pytest.raises(ParameterError, match="--grid horizon: expected a number"):
        plan_sweep(PENDULUM, seeds=range(2), grid=parse_grid(["horizon=abc"]))
    for bad in (["horizon"], ["horizon="], ["horizon=1,,2"], ["horizon=1", "horizon=2"], ["horizon=1,1"]):
        with pytest.raises(ParameterError, match="--grid"):
            parse_grid(bad)
    with pytest.raises(ParameterError, match="--seeds"):
        plan_sweep(PENDULUM, seeds=range(3, 3))
    # every bundled task has a form now: a runner-only task stands in for one that has none
    import contactopt.tasks as registry

    registry.available_tasks()
    monkeypatch.setitem(registry._TASKS, "formless", registry.TaskSpec("formless", "hand", "a runner only",
                                                                       {"gdd": lambda **_: {}}))
    with pytest.raises(ParameterError, match="fixed settings"):
        plan_sweep("formless", seeds=range(2), grid=parse_grid(["horizon=0.5"]))
    # a form: the grid applies to it
    assert plan_sweep("humanoid-reach", seeds=range(2), grid=parse_grid(["horizon=0.5,1"])).units
    with pytest.raises(ContactoptError, match="unknown task"):
        plan_sweep("no-such-task", seeds=range(2))


def test_a_raising_run_is_a_row_with_its_error():
    """GDD refuses the torque-limited pendulum: the unit's row says why, nothing raises."""
    plan = plan_sweep(PENDULUM, planner="gdd", seeds=range(1), seconds=0.2)
    with InlineEngine() as engine:
        ((_, row, meta),) = list(engine.imap_unordered(run_unit, plan.units))
    assert row["success"] is False and row["failure"].startswith("error: ") and "actuator" in row["failure"]
    assert meta["attempts"] == 1


def test_output_dedups_torn_lines_and_rewrites_in_order(tmp_path):
    path = tmp_path / "out.jsonl"
    out = SweepOutput(path)
    out.append({"id": "b", "v": 1})
    out.append({"id": "a", "v": 1})
    out.close()
    with open(path, "a") as fh:
        fh.write('{"id": "a", "v": 2}\n{"id": "c", "v"')  # a rerun of a, then a line torn by a kill
    assert {r["id"]: r["v"] for r in read_rows(path)} == {"b": 1, "a": 2}
    out = SweepOutput(path)
    out.append({"id": "d", "v": 1})  # lands on its own line after the torn one
    rows = out.finalize(["a", "b", "x"])
    assert [r["id"] for r in rows] == ["a", "b", "d"]
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["a", "b", "d"]
    assert not list(tmp_path.glob(".*tmp"))
    with pytest.raises(ParameterError, match="does not exist"):
        SweepOutput(tmp_path / "missing" / "out.jsonl")
    with pytest.raises(ParameterError, match="FILE.jsonl"):
        SweepOutput(tmp_path / "out.csv")


def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    cases = [(["--grid", "nope=1"], "valid: horizon"), (["--grid", "horizon=abc"], "expected a number"),
             (["--seeds", "3:3"], "--seeds"), (["--out", str(tmp_path / "no" / "o.jsonl")], "does not exist"),
             (["--ray", "--address", "127.0.0.1:1"], "no Ray cluster reachable"),
             (["--address", "127.0.0.1:1"], "add --ray")]
    for extra, needle in cases:
        argv = ["sweep", PENDULUM, "--seeds", "0:2", "--out", str(out), *extra]
        assert main(argv) == 1, extra
        err = capsys.readouterr().err
        assert err.startswith("contactopt: error: ") and needle in err and err.count("\n") == 1, (extra, err)
        assert not out.exists() and list(tmp_path.iterdir()) == []


def test_cli_sweep_resumes_and_writes_rows_plots_trajectories(tmp_path):
    out, traj = tmp_path / "s.jsonl", tmp_path / "traj"
    traj.mkdir()
    common = ["--grid", "horizon=0.5,0.8", "--seconds", "0.3", "--lag", "0.02", "--workers", "2", "--out", str(out)]
    p = _sweep("--seeds", "0:1", *common, "--save-trajectories", str(traj), "--plots", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert "horizon" in p.stdout and "ran 2, skipped 0" in p.stdout
    rows = read_rows(out)
    assert len(rows) == 2 and all(ROW_KEYS <= set(r) for r in rows)
    assert [r["grid"]["horizon"] for r in rows] == [0.5, 0.8] and {r["attempts"] for r in rows} == {1}
    assert all((traj / r["trajectory"]).stat().st_size > 1000 for r in rows)
    assert (tmp_path / "sweep_success.png").stat().st_size > 1000
    p = _sweep("--seeds", "0:2", *common, "--json")  # one more seed: only the new units run
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["skipped"] == 2 and info["ran"] == 2 and info["units"] == 4
    assert [s["runs"] for s in info["summary"]] == [2, 2]
    lines = out.read_text().splitlines()
    assert len(lines) == 4 and len({json.loads(x)["id"] for x in lines}) == 4
    # deterministic (fixed lag): a seed's row matches a direct run of `contactopt run`
    p = subprocess.run([sys.executable, "-m", "contactopt", "run", PENDULUM, "--seconds", "0.3", "--lag", "0.02",
                        "--set", "horizon=0.8", "--seed", "1", "--json"], capture_output=True, text=True, env=ENV,
                       timeout=300, check=False)
    report = json.loads(p.stdout)
    (row,) = [r for r in read_rows(out) if r["seed"] == 1 and r["grid"]["horizon"] == 0.8]
    assert row["metric"] == report["final_cost"] and row["success"] == report["success"]


def test_local_pool_retries_a_unit_whose_worker_dies(tmp_path):
    """A worker ``os._exit(1)`` s mid-sweep: the pool restarts, every unit is present exactly once."""
    crash = tmp_path / "crash"
    crash.mkdir()
    (crash / "arm").touch()
    out = tmp_path / "k.jsonl"
    p = _sweep("--seeds", "0:4", "--seconds", "0.3", "--lag", "0.02", "--workers", "2", "--out", str(out), "--json",
               env={**ENV, CRASH_ONCE_ENV: str(crash)})
    assert p.returncode == 0, p.stderr
    assert (crash / "crashed").exists()
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(r["seed"] for r in lines) == [0, 1, 2, 3]
    assert all(r["failure"] in (None, "timeout") for r in lines)
    assert max(r["attempts"] for r in lines) == 2


def test_a_unit_that_always_kills_its_worker_is_lost_alone():
    """Units in flight when a worker dies are retried one at a time: only the killer is lost."""
    units = list(range(3))
    with LocalPoolEngine(2, max_retries=1) as engine:
        got = list(engine.imap_unordered(_pick, units))
    assert sorted(u for u, _, _ in got) == [0, 1, 2]
    lost = [u for u, v, _ in got if isinstance(v, Lost)]
    assert lost == [1] and engine.restarts >= 2


def _pick(unit):
    """Unit 1 kills its worker every time; the others return their square."""
    if unit == 1:
        os._exit(1)
    return unit * unit


# --------------------------------------------------------------------------- --address pre-check


def _listener(reply: bytes | None):
    """A local TCP server on a free port that answers each connection with ``reply`` (None: says
    nothing and holds the connection).  Returns ``(address, stop)``."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held = []

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            held.append(conn)
            if reply is not None:
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()

    def stop():
        srv.close()
        for c in held:
            c.close()

    return f"127.0.0.1:{srv.getsockname()[1]}", stop


def test_ray_address_check_fails_fast_on_a_closed_port():
    import socket
    import time

    from contactopt.sweep.engines import check_ray_address

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        t0 = time.monotonic()
        with pytest.raises(ParameterError, match=f"--address {address}: no Ray cluster reachable") as err:
            check_ray_address(address, 3.0)
        assert time.monotonic() - t0 < 1.0 and "\n" not in str(err.value) and "ray start --head" in str(err.value)


@pytest.mark.parametrize("reply", [None, b"HTTP/1.1 400 Bad Request\r\n\r\n"], ids=["silent", "http1"])
def test_ray_address_check_refuses_a_listener_that_is_not_a_ray_head(reply):
    """What made ray.init hang for minutes: something accepts connections but is not a GCS."""
    import time

    from contactopt.sweep.engines import check_ray_address

    address, stop = _listener(reply)
    try:
        for addr in (address, f"ray://{address}"):
            t0 = time.monotonic()
            with pytest.raises(ParameterError, match="no Ray cluster reachable there: the port accepts"):
                check_ray_address(addr, 0.5)
            assert time.monotonic() - t0 < 2.0
    finally:
        stop()


def test_ray_address_check_passes_an_http2_server_for_ray_client_and_rejects_bad_input():
    from contactopt.sweep.engines import check_ray_address, split_address

    settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame: the server's preface
    address, stop = _listener(settings)
    try:
        check_ray_address(f"ray://{address}", 2.0)  # ray:// needs an HTTP/2 (gRPC) answer only
    finally:
        stop()
    assert split_address("ray://10.0.0.1:10001") == ("10.0.0.1", 10001)
    assert split_address("[::1]:6379") == ("::1", 6379)
    for bad in ("nope", "host:", ":6379", "host:99999", 6379):
        with pytest.raises(ParameterError, match="--address"):
            split_address(bad)
    with pytest.raises(ParameterError, match="timeout"):
        check_ray_address("127.0.0.1:1", 0)


def test_cli_ray_address_with_nothing_there_is_one_line_in_seconds(tmp_path):
    pytest.importorskip("ray")
    import time

    out = tmp_path / "x.jsonl"
    t0 = time.monotonic()
    p = _sweep("--seeds", "0:1", "--ray", "--address", "127.0.0.1:1", "--out", str(out), timeout=60)
    assert p.returncode == 1 and time.monotonic() - t0 < 30  # imports included; the check itself is instant
    assert p.stderr.count("\n") == 1 and "--address 127.0.0.1:1: no Ray cluster reachable" in p.stderr
    assert not out.exists()


def test_every_entry_point_starts_a_task_file_with_its_own_planner(tmp_path):
    """``run``, ``sweep``, ``serve`` and ``gui`` agree on a task file's planner: the first of its
    ``planner_options`` (:attr:`Task.default_planner`), ``ilqg`` when it names none."""
    from contactopt.gui.cli import load_gui_task
    from contactopt.remote.server import load_served_task

    xml = str(Path(PENDULUM).parent / "pendulum.xml")
    source = Path(PENDULUM).read_text().replace('model="pendulum.xml"', f"model={xml!r}")
    source = source.replace("duration=8.0)", 'duration=8.0, planner_options={"idto": {}})')
    file = tmp_path / "pendulum_idto_task.py"
    file.write_text(source)
    assert plan_sweep(str(file), seeds=range(1), seconds=0.1, lag=0.02).planner == "idto"
    assert load_served_task(str(file))[1] == "idto"
    assert load_gui_task(str(file))[0].default_planner == "idto"
    assert plan_sweep(PENDULUM, seeds=range(1), seconds=0.1, lag=0.02).planner == "ilqg"
    assert load_served_task(PENDULUM)[1] == "ilqg"
    # the GUI runs a bundled task at its target slowdown, a task file in real time
    assert load_gui_task("humanoid-getup")[1] == 2.0 and load_gui_task(PENDULUM)[1] == 1.0
