"""``contactopt serve`` and ``contactopt run --remote`` as commands."""

import json
import socket
import subprocess
import sys
import time

import pytest

from contactopt.cli import main


def test_help_does_not_import_grpc():
    code = ("import sys, contactopt.cli as c; c.build_parser(); import contactopt.remote; "
            "print('grpc' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert out.stdout.strip() == "False", out.stderr


def test_missing_extra_is_one_line():
    code = ("import sys; sys.modules['grpc'] = None; from contactopt.cli import main; "
            "sys.exit(main(['serve', 'acrobot', '--port', '0']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 1
    assert out.stderr.strip().count("\n") == 0 and "pip install -U contactopt[server]" in out.stderr, out.stderr


def test_serve_refusals_are_one_line(capsys, tmp_path):
    pytest.importorskip("grpc")
    # a planner that cannot run the task is refused before the server listens
    assert main(["serve", "hand-reach", "--planner", "ilqg"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("contactopt: error: planner 'ilqg' cannot run task hand-reach: cost term goal(") \
        and err.count("\n") == 1
    assert main(["serve", "acrobot", "--host", "0.0.0.0"]) == 1
    assert "token is required" in capsys.readouterr().err
    empty = tmp_path / "token"
    empty.write_text("  \n")
    assert main(["serve", "acrobot", "--token-file", str(empty)]) == 1
    assert "expected one token" in capsys.readouterr().err
    assert main(["run", "acrobot", "--token-file", str(empty)]) == 1
    assert "apply to --remote runs" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.realtime
def test_serve_and_run_remote_with_token(tmp_path, capsys):
    pytest.importorskip("grpc")
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "contactopt", "serve", "acrobot", "--planner", "ilqg", "--port",
                             str(port), "--token-file", str(token)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert f"listening on 127.0.0.1:{port}" in line, proc.stderr.read() if proc.poll() is not None else line
        status = main(["run", "acrobot", "--remote", f"127.0.0.1:{port}", "--token-file", str(token), "--seconds",
                       "1", "--json"])
        report = json.loads(capsys.readouterr().out)
        assert status in (0, 3) and report["planner"] == "ilqg" and report["updates"] > 10
        assert report["remote"]["round_trip_ms_p99"] is not None
        wrong = tmp_path / "wrong"
        wrong.write_text("nope")
        assert main(["run", "acrobot", "--remote", f"127.0.0.1:{port}", "--token-file", str(wrong)]) == 1
        assert "UNAUTHENTICATED" in capsys.readouterr().err
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert "refused" in proc.stderr.read()
    time.sleep(0.1)


@pytest.mark.slow
def test_bench_remote_runs():
    pytest.importorskip("grpc")
    from contactopt.bench import available_benchmarks

    bench = available_benchmarks()["remote"]
    result = bench.run(None, min_time=0.02, seeds=0)
    row = result["rows"][0]
    assert row["task"] == "humanoid-getup" and row["calls"] >= 1000
    assert 0 < row["round_trip_ms_median"] <= row["round_trip_ms_p99"]
    assert row["policy_replies_per_s"] > 0 and "closed_loop" not in result
    assert "rtt p99" in bench.table(result)


def test_bench_remote_takes_a_seed_range(monkeypatch):
    """``--seeds A:B`` reaches the closed-loop comparison as that range (an unseen one), a count as
    ``0..N-1``; a negative count is refused."""
    from contactopt.bench import available_benchmarks, remote_bench
    from contactopt.errors import ParameterError

    seen = []
    monkeypatch.setattr(remote_bench, "_serve", lambda task, planner: (None, "127.0.0.1:1"))
    monkeypatch.setattr(remote_bench, "_stop", lambda proc: None)
    monkeypatch.setattr(remote_bench, "_round_trips", lambda address, min_time: {"task": "t"})
    monkeypatch.setattr(remote_bench, "_success", lambda seeds, name: seen.append((name, seeds)) or {})
    bench = available_benchmarks()["remote"]
    assert bench.seed_ranges
    pytest.importorskip("grpc")
    bench.run(None, seeds=range(1000, 1004), tasks=["acrobot"])
    bench.run(None, seeds=2, tasks=["acrobot"])
    assert seen == [("acrobot", range(1000, 1004)), ("acrobot", range(0, 2))]
    with pytest.raises(ParameterError, match="seeds"):
        bench.run(None, seeds=-1)
