"""``contactopt bench idto``: convergence curves, timing keys, generic least-squares race, bad input."""

import itertools
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from contactopt.bench import get_benchmark
from contactopt.bench import idto_bench as ib
from contactopt.errors import ContactoptError, ParameterError
from contactopt.model import load_model
from contactopt.solvers.idto import IDTOProblem
from contactopt.tasks.acrobot import ACROBOT_IDTO as ACROBOT
from contactopt.tasks.spinner import SPINNER
from contactopt.testing import finite_difference_jacobian

ROW_KEYS = {"task": str, "nv": int, "steps": int, "iteration_ms": float, "derivatives_ms": float,
            "factorization_ms": float, "mpc_hz": float, "scipy_time_ratio": float,
            "mujoco_minimize_time_ratio": float, "hessian_ms": float, "rest_ms": float,
            "mpc_target_hz": float, "mpc_target_met": bool, "scipy_reached": bool,
            "mujoco_minimize_reached": bool, "speedup_target_met": bool}


def _check_row(row, task, steps):
    for key, typ in ROW_KEYS.items():
        assert isinstance(row[key], typ), (key, row[key])
    assert row["task"] == task and row["steps"] == steps
    for key in ("iteration_ms", "derivatives_ms", "factorization_ms", "mpc_hz", "scipy_time_ratio",
                "mujoco_minimize_time_ratio"):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert row["derivatives_ms"] <= row["iteration_ms"] * 1.001
    assert row["mpc_target_met"] == (row["mpc_hz"] >= row["mpc_target_hz"])
    # the ratios are the generic solvers' seconds over ours, as reported
    for name, key in (("scipy", "scipy_time_ratio"), ("mujoco", "mujoco_minimize_time_ratio")):
        g = row["generic"][name]
        assert row[key] == pytest.approx(g["seconds"] / row["our_compare_seconds"])
        assert g["reached"] == (g["stopped"] == "reached")
    conv = row["methods"]
    assert set(conv) == {"penalty", "constrained"}
    for c in conv.values():
        n = len(c["cost"])
        assert n == len(c["violation"]) >= 2
        assert all(math.isfinite(x) for x in c["cost"])
    # the trust-region solver accepts only decreases
    pen = conv["penalty"]["cost"]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(pen, pen[1:]))


def test_quick_run_json_keys_plot_and_table(tmp_path):
    result = ib.run(["acrobot"], quick=True, plots=tmp_path)
    json.dumps(result)  # JSON-ready
    assert result["quick"] is True and [r["task"] for r in result["tasks"]] == ["acrobot"]
    row = result["tasks"][0]
    _check_row(row, "acrobot", ib.QUICK_SETTINGS["horizon"])
    assert row["nv"] == 2 and row["mpc_target_hz"] == 100.0
    n = ib.QUICK_SETTINGS["mpc_updates"]
    assert n - 1 <= row["mpc"]["updates"] <= n and row["mpc"]["failed_updates"] == 0
    png = tmp_path / "idto_convergence_acrobot.png"
    assert row["plot"] == str(png)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    text = ib.table(result)
    assert "acrobot" in text and "MPC Hz / target" in text and ("met" in text or "missed" in text)


def test_failed_mpc_run_is_reported_not_fatal(monkeypatch):
    def boom(*args, **kwargs):
        raise ContactoptError("the initial plan failed: test")

    monkeypatch.setattr(ib, "mpc_rate", boom)
    row = ib.benchmark_task(ACROBOT, settings={**ib.QUICK_SETTINGS, "horizon": 4, "convergence_iterations": 2})
    assert row["mpc_hz"] is None and row["mpc_target_met"] is False
    assert "initial plan failed" in row["mpc"]["error"]
    text = ib.table({"tasks": [row]})
    assert "MPC run failed" in text and "acrobot" in text


def test_generic_solvers_reach_the_target_or_say_so():
    planner, q_guess = ib.open_loop_problem(ACROBOT, horizon=6, workers=1)
    pr = planner.problem
    ours = ib.our_solve_time(planner, q_guess, 10)
    assert ours["cost"] == pytest.approx(pr.cost(ours["q"]), rel=1e-12)
    assert ours["cost"] < pr.cost(q_guess)
    for solver, jacobian in itertools.product(("scipy", "mujoco"), ("analytic", "finite-difference")):
        g = ib.generic_least_squares(pr, q_guess, ours["cost"], solver=solver, time_limit=30.0, jacobian=jacobian)
        # the cost it claims is the problem's own cost of the trajectory it returns
        assert g["cost"] == pytest.approx(pr.cost(g["q"]), rel=1e-12), solver
        np.testing.assert_allclose(g["q"][0], pr.q_init)
        if jacobian == "analytic":
            assert g["residual_evaluations"] >= 1 and g["jacobian_evaluations"] >= 1
        else:  # the solver differences the residual itself: T·nv extra residuals per Jacobian
            assert g["jacobian_evaluations"] == 0 and g["residual_evaluations"] > pr.num_variables
        if g["reached"]:
            assert g["cost"] <= ours["cost"] * (1 + 1e-9) and g["stopped"] == "reached"
        else:
            assert g["cost"] > ours["cost"] and g["stopped"] in ("time_limit", "solver_finished")


def test_unreachable_target_is_reported_not_reached():
    planner, q_guess = ib.open_loop_problem(ACROBOT, horizon=4, workers=1)
    pr = planner.problem
    for solver in ("scipy", "mujoco"):
        g = ib.generic_least_squares(pr, q_guess, 0.0, solver=solver, time_limit=0.5, max_iterations=50)
        assert not g["reached"] and g["stopped"] in ("time_limit", "solver_finished")
        assert g["cost"] == pytest.approx(pr.cost(g["q"]), rel=1e-12)
        assert 0.0 < g["cost"] < pr.cost(q_guess)  # it made progress, and says where it stopped
        assert g["seconds"] < 5.0


def test_tangent_parametrization_jacobian_with_quaternions(rng):
    """For a free body, the chain-ruled Jacobian in x (q = q_ref ⊕ x) matches finite differences."""
    m = load_model("ball")
    assert m.nq == m.nv + 1
    T = 3
    pr = IDTOProblem(m, T, 0.05, m.qpos0, Qq=1.0, Qv=0.1, R=0.1, Qf_q=5.0, unactuated_penalty=10.0)
    q_ref = np.tile(pr.q_init, (T + 1, 1))
    q_ref[1:] = pr.retract(q_ref, rng.normal(scale=0.3, size=(T, m.nv)))[1:]
    x = rng.normal(scale=0.4, size=T * m.nv)
    R = ib._retraction_jacobian(pr, q_ref, x)
    assert R.shape == (T, m.nv, m.nv)
    np.testing.assert_allclose(ib._retraction_jacobian(pr, q_ref, np.zeros_like(x)),
                               np.broadcast_to(np.eye(m.nv), R.shape), atol=1e-8)
    assert np.abs(R[:, 3:, 3:] - np.eye(3)).max() > 1e-3  # a real rotation: not the identity
    J = pr.dense_jacobian(pr.linearize(pr.retract(q_ref, x)))
    Jx = np.einsum("mtk,tki->mti", J.reshape(-1, T, m.nv), R).reshape(-1, T * m.nv)
    r0 = pr.residuals(pr.retract(q_ref, x))
    fd = finite_difference_jacobian(lambda xx: pr.residuals(pr.retract(q_ref, xx)), x, eps=1e-6)
    assert r0.shape[0] == Jx.shape[0]
    np.testing.assert_allclose(Jx, fd, atol=2e-4 * max(1.0, np.abs(fd).max()))


def test_convergence_breakdown_and_both_methods():
    planner, q_guess = ib.open_loop_problem(SPINNER, horizon=5, workers=1)
    conv = ib.convergence(planner, q_guess, 3)
    for method in ("penalty", "constrained"):
        c = conv[method]
        assert len(c["cost"]) == 4 and c["final_cost"] == c["cost"][-1]
        assert c["iteration_ms"] > 0 and c["derivatives_ms"] > 0 and c["factorization_ms"] > 0
        assert c["status"] == "max_iterations"
    assert ib.iteration_breakdown([]) == {"iteration_ms": None, "derivatives_ms": None, "hessian_ms": None,
                                          "factorization_ms": None, "rest_ms": None}


def test_speedup_verdict_and_ratio_text():
    reached = {"reached": True, "stopped": "reached", "time_ratio": 3.0}
    capped = {"reached": False, "stopped": "time_limit", "time_ratio": 12.0}
    short = {"reached": False, "stopped": "time_limit", "time_ratio": 4.0}
    never = {"reached": False, "stopped": "solver_finished", "time_ratio": 0.5}
    assert not ib._beats(reached) and ib._beats({**reached, "time_ratio": 10.0})
    assert ib._beats(capped) and not ib._beats(short) and ib._beats(never)
    assert ib._fmt_ratio(3.0, reached) == "3.0" and ib._fmt_ratio(12.0, capped) == "≥12.0 (not reached)"
    assert ib._fmt_ratio(0.5, never) == "never (stopped)"


def test_registered_with_plots_option():
    bench = get_benchmark("idto")
    assert bench.options == ("plots", "horizon_sweep") and bench.run is ib.run
    assert {t.name for t in ib.idto_tasks()} >= {"spinner", "hopper", "acrobot"}
    assert [t.name for t in ib.idto_tasks(["acrobot"])] == ["acrobot"]


@pytest.mark.parametrize("call, words", [
    (lambda: ib.idto_tasks(["nope"]), "no IDTO task named nope"),
    (lambda: ib.run(["nope"], quick=True), "no IDTO task named nope"),
    (lambda: ib.run(["acrobot"], quick=True, bogus=1), "unknown IDTO bench setting"),
    (lambda: ib.run(["acrobot"], quick=True, plots="/nowhere/at/all"), "not an existing directory"),
    (lambda: ib.generic_least_squares(None, None, 1.0, solver="nope"), "solver must be"),
    (lambda: ib.generic_least_squares(None, None, 1.0, jacobian="exact"), "jacobian must be"),
    (lambda: ib.generic_least_squares(None, None, 1.0, time_limit=0.0), "time_limit must be positive"),
    (lambda: ib.generic_least_squares(None, None, math.nan), "target_cost must be finite"),
    (lambda: ib.mpc_rate(ACROBOT, updates=0), "updates must be a positive integer"),
    (lambda: ib.horizon_sweep([ACROBOT], (1, 10)), "at least 2 steps"),
    (lambda: ib.horizon_sweep([ACROBOT], (), iterations=2), "at least 2 steps"),
    (lambda: ib.horizon_sweep([ACROBOT], (10,), iterations=0), "iterations must be >= 1"),
])
def test_bad_input(call, words):
    with pytest.raises(ParameterError, match=words):
        call()


def test_cli_quick_json_and_unknown_task(tmp_path):
    env = {**os.environ, "CONTACTOPT_IDTO_BENCH_QUICK": "1"}
    cli = [sys.executable, "-m", "contactopt", "bench", "idto"]
    proc = subprocess.run(cli + ["--model", "acrobot", "--json", "--plots", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    _check_row(result["tasks"][0], "acrobot", ib.QUICK_SETTINGS["horizon"])
    assert (tmp_path / "idto_convergence_acrobot.png").stat().st_size > 10_000
    bad = subprocess.run(cli + ["--model", "nope"], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    assert bad.stderr.startswith("contactopt: error: ") and "no IDTO task named nope" in bad.stderr
    assert "spinner" in bad.stderr  # lists the tasks there are


def test_growth_exponent_recovers_a_power_law():
    T = np.array([10, 20, 40, 80])
    assert ib.growth_exponent(T, 0.3 * T ** 3.0) == pytest.approx(3.0)
    assert ib.growth_exponent(T, 2.0 * T) == pytest.approx(1.0)
    assert ib.growth_exponent([10, 20], [1.0, math.nan]) is None  # fewer than two usable points
    assert ib.growth_exponent([10], [1.0]) is None


def test_horizon_sweep_rows_fits_and_cli(tmp_path):
    """Fig. 4's data: one row per (task, method, horizon) with the solver's own timing, a fit per
    (task, method); the CLI's --horizon-sweep prints them as JSON and writes the plot."""
    rows, fits = ib.horizon_sweep([ACROBOT], (4, 8, 16), iterations=2)
    assert [(r["method"], r["horizon"]) for r in rows] == [
        (m, T) for T in (4, 8, 16) for m in ("penalty", "constrained", "constrained-banded")]
    for r in rows:
        assert r["task"] == "acrobot" and r["ms_per_iteration"] > 0 and math.isfinite(r["ms_per_iteration"])
        assert r["horizon_s"] == pytest.approx(r["horizon"] * ACROBOT.time_step)
    assert {f["method"] for f in fits} == {"penalty", "constrained", "constrained-banded"}
    for f in fits:
        mine = [r for r in rows if r["method"] == f["method"]]
        assert f["exponent"] == pytest.approx(ib.growth_exponent(
            [r["horizon"] for r in mine], [r["ms_per_iteration"] for r in mine]))
    env = {**os.environ, "CONTACTOPT_IDTO_BENCH_QUICK": "1"}
    proc = subprocess.run([sys.executable, "-m", "contactopt", "bench", "idto", "--horizon-sweep", "--model",
                           "acrobot", "--json", "--plots", str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert {r["horizon"] for r in result["horizon_sweep"]} == set(ib.SWEEP_HORIZONS[:3])
    assert {(f["task"], f["method"]) for f in result["horizon_fit"]} == {
        ("acrobot", "penalty"), ("acrobot", "constrained"), ("acrobot", "constrained-banded")}
    assert (tmp_path / "idto_horizon_sweep.png").stat().st_size > 10_000
    other = subprocess.run([sys.executable, "-m", "contactopt", "bench", "tasks", "--horizon-sweep"],
                           capture_output=True, text=True, timeout=60)
    assert other.returncode == 1 and "has no horizon sweep" in other.stderr


def test_convex_newton_step_row_and_its_line():
    """The convex model's Newton step (item 5 of bench idto): a short quadruped problem, every
    iteration that linearized counted, the per-core comparison computed from the measured median."""
    row = ib.convex_newton_step("quadruped", horizon=4, iterations=2, workers=1)
    assert row["backend"] == "convex" and row["horizon_steps"] == 4 and row["nv"] == 18
    assert row["newton_steps"] >= 1 and row["newton_step_ms"] > 0
    assert row["newton_step_ms_min"] <= row["newton_step_ms"]
    assert {"jacobian", "residual", "factor"} <= set(row["breakdown_ms"])
    assert row["core_seconds"] == pytest.approx(row["newton_step_ms"] / 1e3)
    assert row["paper_core_seconds"] == pytest.approx(0.16 * 12)
    assert row["per_core_ratio"] == pytest.approx(row["core_seconds"] / 1.92)
    line = ib.table({"tasks": [], "settings": {}, "cpu_count": 2, "newton_step": row})
    assert "convex Newton step (quadruped, 4 knots of 50 ms" in line and "per core" in line
    with pytest.raises(ParameterError, match="iterations must be"):
        ib.convex_newton_step(iterations=0)
