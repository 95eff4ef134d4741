"""simulate(): recording, bad input, divergence."""

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt import NonFiniteError, ParameterError, ShapeError, SimulationError

STIFF_XML = """
<mujoco model="stiff">
  <option timestep="0.1"/>
  <worldbody><body><joint name="j" type="hinge" stiffness="1e7"/><geom type="sphere" size=".1" pos=".2 0 0"/></body></worldbody>
  <actuator><motor joint="j" ctrlrange="-1 1"/></actuator>
  <keyframe><key name="home" qpos="0.5"/></keyframe>
</mujoco>
"""


def test_simulate_records_consistent_arrays():
    model = contactopt.load_model("ball")
    result = contactopt.simulate(model, 0.8)
    n = int(round(0.8 / model.opt.timestep))
    assert result.steps == n and result.qpos.shape == (n + 1, 7) and result.ctrl.shape == (n, 3)
    np.testing.assert_allclose(result.time[-1], 0.8)
    # free fall first: no contact, energy conserved, then the ball lands and rests
    assert result.contact_count[0] == 0 and result.contact_count[-1] >= 1
    assert result.normal_force[-1] == pytest.approx(contactopt.total_mass(model) * 9.81, rel=0.05)
    assert not model.opt.enableflags & mujoco.mjtEnableBit.mjENBL_ENERGY  # flag restored
    summary = result.summary()
    assert summary["steps"] == n and summary["contacts_final"] >= 1


def test_simulate_with_controller_and_initial_state():
    model = contactopt.load_model("acrobot")
    q0 = np.array([0.3, -0.2])
    result = contactopt.simulate(model, 0.5, qpos=q0, controller=lambda m, d: np.array([0.5]))
    np.testing.assert_allclose(result.qpos[0], q0)
    assert np.all(result.ctrl == 0.5)


def test_simulate_bad_input():
    model = contactopt.load_model("acrobot")
    with pytest.raises(ParameterError, match="seconds must be non-negative"):
        contactopt.simulate(model, -1.0)
    with pytest.raises(NonFiniteError, match="seconds"):
        contactopt.simulate(model, float("nan"))
    with pytest.raises(ShapeError, match=r"qpos: expected shape \(2,\), got \(3,\)"):
        contactopt.simulate(model, 1.0, qpos=np.zeros(3))
    with pytest.raises(NonFiniteError, match="qvel"):
        contactopt.simulate(model, 1.0, qvel=np.array([0.0, np.nan]))
    with pytest.raises(NonFiniteError, match="controller output"):
        contactopt.simulate(model, 1.0, controller=lambda m, d: np.array([np.nan]))
    with pytest.raises(ParameterError, match="no keyframe 'nope'"):
        contactopt.simulate(model, 1.0, keyframe="nope")


def test_divergence_is_reported_not_silent():
    model = mujoco.MjModel.from_xml_string(STIFF_XML)
    with pytest.raises(SimulationError, match="diverged at t = ") as info:
        contactopt.simulate(model, 100.0)
    partial = info.value.result
    assert partial is not None and partial.steps < 1000


@pytest.mark.parametrize("name, cone", [("humanoid", "pyramidal"), ("humanoid", "elliptic"), ("hand", "pyramidal")])
def test_total_normal_force_matches_mj_contact_force(name, cone):
    """The vectorized reading of efc_force equals the per-contact mj_contactForce sum."""
    from contactopt.simulate import total_normal_force

    model = contactopt.load_model(name)
    model.opt.cone = getattr(mujoco.mjtCone, f"mjCONE_{cone.upper()}")
    data = mujoco.MjData(model)
    contactopt.reset_to_keyframe(model, data, "lying" if name == "humanoid" else "home")
    for _ in range(100):
        mujoco.mj_step(model, data)
    assert data.ncon > 0
    out = np.zeros(6)
    reference = 0.0
    for i in range(data.ncon):
        mujoco.mj_contactForce(model, data, i, out)
        reference += out[0]
    assert total_normal_force(model, data) == pytest.approx(reference, rel=1e-12, abs=1e-12)
