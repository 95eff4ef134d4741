"""Plant model error for robustness runs: actuator gain scaling, unmodelled latency, and
``contactopt bench robustness`` (success rate against each plant parameter)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

from contactopt.bench import robustness_bench as rb
from contactopt.errors import ParameterError
from contactopt.model import load_model
from contactopt.mpc import ConstantPolicy, MPCSettings, PlannerUpdate, model_error, perturb_model, run_mpc

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

SERVO_XML = """
<mujoco>
  <worldbody>
    <body><joint name="a" type="hinge" axis="0 1 0"/><geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.02" mass="1"/></body>
    <body pos="1 0 0"><joint name="b" type="slide" axis="1 0 0"/><geom type="box" size="0.1 0.1 0.1" mass="2"/></body>
  </worldbody>
  <actuator>
    <motor joint="a" gear="3"/>
    <position joint="b" kp="50" kv="4"/>
  </actuator>
</mujoco>
"""


def _actuator_force(model, qpos, qvel, ctrl):
    d = mujoco.MjData(model)
    d.qpos[:], d.qvel[:], d.ctrl[:] = qpos, qvel, ctrl
    mujoco.mj_forward(model, d)
    return d.actuator_force.copy()


def test_gain_scale_scales_motor_and_servo_forces_and_keeps_the_set_point():
    m = mujoco.MjModel.from_xml_string(SERVO_XML)
    qpos, qvel, ctrl = np.array([0.3, 0.2]), np.array([0.5, -1.0]), np.array([0.7, 0.6])
    nominal = _actuator_force(m, qpos, qvel, ctrl)
    scaled = _actuator_force(perturb_model(m, gain_scale=0.8), qpos, qvel, ctrl)
    np.testing.assert_allclose(scaled, 0.8 * nominal, rtol=1e-12)
    # the servo still pulls to its set point: zero force there, at any scale
    at_target = _actuator_force(perturb_model(m, gain_scale=1.2), np.array([0.0, 0.6]), np.zeros(2), ctrl)
    assert at_target[1] == pytest.approx(0.0, abs=1e-12)
    assert m.actuator_gainprm[1, 0] == 50  # the argument is unchanged


def test_gain_scale_refuses_muscles_and_bad_scales():
    muscle = mujoco.MjModel.from_xml_string("""
    <mujoco><worldbody><site name="s0"/><body pos="0 0 -0.3"><joint type="slide" axis="0 0 1"/>
    <geom type="sphere" size="0.05" mass="1"/><site name="s1"/></body></worldbody>
    <tendon><spatial name="t"><site site="s0"/><site site="s1"/></spatial></tendon>
    <actuator><muscle name="m" tendon="t" lengthrange="0.2 0.4"/></actuator></mujoco>""")
    with pytest.raises(ParameterError, match="actuator m is not a motor or servo"):
        perturb_model(muscle, gain_scale=0.9)
    perturb_model(muscle, mass_scale=1.1)  # other errors still apply
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ParameterError, match="gain_scale must be a positive number"):
            perturb_model(muscle, gain_scale=bad)


def test_model_error_reports_only_departures_from_nominal():
    assert model_error() == {}
    assert model_error(mass_scale=1.2, latency=0.02) == {"mass_scale": 1.2, "latency": 0.02}
    with pytest.raises(ParameterError, match="latency must be seconds >= 0"):
        model_error(latency=-0.01)
    with pytest.raises(ParameterError, match="friction_scale must be a positive number"):
        model_error(friction_scale=0.0)


class _StampPlanner:
    """Constant control = the time planned from; no compute time."""

    nu = 1

    def reset(self, t, x):
        return PlannerUpdate(ConstantPolicy(np.full(self.nu, t), t0=t), compute_time=0.0)

    def update(self, t, x):
        self.lags = getattr(self, "lags", [])
        return PlannerUpdate(ConstantPolicy(np.full(self.nu, t), t0=t), compute_time=0.0)

    def observe_lag(self, lag):
        self.observed = getattr(self, "observed", []) + [lag]


def test_added_latency_delays_application_but_not_the_lag_the_planner_sees():
    m = load_model("acrobot", timestep=0.002)
    m.actuator_ctrlrange[:] = [-100, 100]
    planner = _StampPlanner()
    planner.nu = m.nu
    res = run_mpc(planner, m, mujoco.MjData(m),
                  MPCSettings(duration=0.1, lag=0.004, update_period=0.02, added_latency=0.01))
    delays = [u.t_apply - u.t_state for u in res.updates]
    np.testing.assert_allclose(delays, 0.014, atol=1e-9)
    if hasattr(planner, "observed"):  # lag compensation is told only the modelled lag
        np.testing.assert_allclose(planner.observed, 0.004)
    # the plan made at 0.04 s (control 0.04) takes effect at 0.054 s, not before
    assert res.ctrl[np.searchsorted(res.time, 0.05), 0] == pytest.approx(0.02, abs=1e-9)
    assert res.ctrl[np.searchsorted(res.time, 0.06), 0] == pytest.approx(0.04, abs=1e-9)
    with pytest.raises(ParameterError, match="added_latency is a sync-mode setting"):
        MPCSettings(duration=1.0, mode="async", added_latency=0.01)
    with pytest.raises(ParameterError, match="added_latency must be"):
        MPCSettings(duration=1.0, added_latency=-1.0)


def test_breaks_finds_the_nearest_failing_values_on_each_side():
    rows = [{"task": "t", "planner": "p", "parameter": "mass_scale", "value": v, "success_rate": r}
            for v, r in ((0.7, 0.0), (0.85, 0.25), (1.0, 1.0), (1.15, 0.75), (1.3, 0.5))]
    # a nominal rate of 0.5: breaking means falling under 0.25
    rows += [{"task": "t", "planner": "p", "parameter": "gain_scale", "value": v, "success_rate": r}
             for v, r in ((0.8, 0.25), (0.9, 0.0), (1.0, 0.5), (1.1, 0.5), (1.2, 0.125))]
    rows += [{"task": "t", "planner": "p", "parameter": "latency", "value": v, "success_rate": r}
             for v, r in ((0.0, 1.0), (0.01, 1.0), (0.02, 0.0), (0.04, 0.0))]
    b = {x["parameter"]: x for x in rb.breaks(rows)}
    assert (b["mass_scale"]["low"], b["mass_scale"]["high"], b["mass_scale"]["nominal_rate"]) == (0.85, None, 1.0)
    assert (b["latency"]["low"], b["latency"]["high"]) == (None, 0.02)
    assert (b["gain_scale"]["low"], b["gain_scale"]["high"]) == (0.9, 1.2)


def test_bad_options():
    with pytest.raises(ParameterError, match="unknown robustness parameter"):
        rb.run(tasks=["acrobot"], parameters=["stiffness"])
    with pytest.raises(ParameterError, match="--model"):
        rb.run(["acrobot"])
    with pytest.raises(ParameterError, match="not an existing directory"):
        rb.run(tasks=["acrobot"], plots="/nowhere/at/all")


@pytest.mark.realtime
@pytest.mark.slow
def test_bench_robustness_on_a_task_file_end_to_end(tmp_path):
    """The pendulum task file (not a bundled task) with iLQG over the latency grid, one seed:
    every grid value has a row, the nominal row is the shared nominal run, the plot is written;
    and the CLI runs the same bench and prints JSON."""
    task_file = str(EXAMPLES / "pendulum" / "pendulum_task.py")
    result = rb.run(tasks=[task_file], planner="ilqg", seeds="0:1", parameters=["latency"], plots=tmp_path)
    rows = result["rows"]
    assert [r["value"] for r in rows] == list(rb.GRID["latency"])
    assert all(r["successes"] + sum(r["failures"].values()) == 1 for r in rows)
    assert {r["mode"] for r in rows} == {"sync measured lag"} and not result["deterministic"]
    assert result["breaks"][0]["parameter"] == "latency"
    assert Path(result["plots"][0]).stat().st_size > 10_000
    assert "where each pair breaks" in rb.table(result)
    proc = subprocess.run([sys.executable, "-m", "contactopt", "bench", "robustness", "--tasks", "nope",
                           "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "contactopt: error:" in proc.stderr and "nope" in proc.stderr


@pytest.mark.realtime
@pytest.mark.slow
def test_bench_robustness_deterministic_runs_at_the_calibrated_fixed_lag(tmp_path, monkeypatch):
    """--deterministic: the pair's lag is calibrated once (into the cache under XDG_CACHE_HOME)
    before the runs, every run uses that fixed lag, and the rows say so."""
    from contactopt.mpc import calibration

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    task_file = str(EXAMPLES / "pendulum" / "pendulum_task.py")
    result = rb.run(tasks=[task_file], planner="ilqg", seeds="0:1", parameters=["latency"], deterministic=True)
    assert result["deterministic"] and {r["mode"] for r in result["rows"]} == {"sync fixed lag"}
    cached = json.loads(calibration.cache_path().read_text())
    assert len(cached) == 1 and "sync fixed lag" in rb.table(result)


def test_cli_run_takes_gain_scale_and_latency_and_reports_them():
    task_file = str(EXAMPLES / "pendulum" / "pendulum_task.py")
    proc = subprocess.run([sys.executable, "-m", "contactopt", "run", task_file, "--seconds", "0.3",
                           "--gain-scale", "0.9", "--latency", "0.01", "--json"],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode in (0, 3), proc.stderr
    report = json.loads(proc.stdout)
    assert report["model_error"] == {"gain_scale": 0.9, "latency": 0.01}
    bad = subprocess.run([sys.executable, "-m", "contactopt", "run", task_file, "--latency", "-1"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "--latency must be" in bad.stderr
