"""Every bundled model loads, matches its documented dimensions, and simulates stably."""

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt.models import BUNDLED_MODELS

# (nq, nv, nu) from the issue / seed papers.
EXPECTED_DIMS = {
    "ball": (7, 6, 3),
    "humanoid": (23, 22, 16),
    "acrobot": (2, 2, 1),
    "swimmer": (6, 6, 3),
    "hopper": (5, 5, 2),
    "hopper-foot": (5, 5, 2),
    "spinner": (3, 3, 2),
    "quadruped": (19, 18, 12),
    "quadruped-hills": (19, 18, 12),
    "hand": (23, 22, 16),
    "bimanual": (21, 20, 14),
}
PRIMITIVES = {int(mujoco.mjtGeom.mjGEOM_PLANE), int(mujoco.mjtGeom.mjGEOM_SPHERE),
              int(mujoco.mjtGeom.mjGEOM_CAPSULE), int(mujoco.mjtGeom.mjGEOM_BOX),
              int(mujoco.mjtGeom.mjGEOM_CYLINDER)}


def test_library_lists_the_nine_seed_systems():
    seed_systems = {"ball", "humanoid", "acrobot", "swimmer", "hopper", "spinner",
                    "quadruped", "hand", "bimanual"}
    assert seed_systems <= set(BUNDLED_MODELS)
    assert set(EXPECTED_DIMS) == set(BUNDLED_MODELS)


@pytest.mark.parametrize("name", sorted(BUNDLED_MODELS))
def test_model_structure(name):
    model = contactopt.load_model(name)
    assert (model.nq, model.nv, model.nu) == EXPECTED_DIMS[name]
    assert model.nu > 0 and model.actuator_ctrllimited.all(), "every actuator needs a ctrlrange"
    assert (model.actuator_ctrlrange[:, 0] < model.actuator_ctrlrange[:, 1]).all()
    colliding = (model.geom_contype != 0) | (model.geom_conaffinity != 0)
    assert set(model.geom_type[colliding].tolist()) <= PRIMITIVES
    text = BUNDLED_MODELS[name].path.read_text()
    assert "<!--" in text[:600], "model file must open with a comment on what it models"
    assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "home") == 0


def test_model_masses_match_the_papers():
    assert contactopt.total_mass(contactopt.load_model("humanoid")) == pytest.approx(55.0, rel=0.02)
    assert contactopt.total_mass(contactopt.load_model("quadruped")) == pytest.approx(9.0, rel=0.02)
    hand = contactopt.load_model("hand")
    assert hand.body_mass[mujoco.mj_name2id(hand, mujoco.mjtObj.mjOBJ_BODY, "ball")] == pytest.approx(0.05)
    bim = contactopt.load_model("bimanual")
    box = mujoco.mj_name2id(bim, mujoco.mjtObj.mjOBJ_BODY, "box")
    assert bim.body_mass[box] == pytest.approx(0.55)
    spheres = [g for g in range(bim.ngeom) if bim.geom_bodyid[g] == box
               and bim.geom_contype[g] | bim.geom_conaffinity[g]]
    assert len(spheres) == 9 and all(bim.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE for g in spheres)
    # inscribed: every collision sphere lies inside the 15 cm cube
    for g in spheres:
        assert np.all(np.abs(bim.geom_pos[g]) + bim.geom_size[g, 0] <= 0.075 + 1e-9)


def test_humanoid_is_1_6_m_tall_standing():
    model = contactopt.load_model("humanoid")
    data = mujoco.MjData(model)
    contactopt.reset_to_keyframe(model, data, "home")
    mujoco.mj_forward(model, data)
    top = max(data.geom_xpos[g, 2] + model.geom_rbound[g] for g in range(model.ngeom) if model.geom_bodyid[g])
    assert top == pytest.approx(1.6, abs=0.05)


@pytest.mark.parametrize("name", sorted(BUNDLED_MODELS))
def test_passive_simulation_is_stable_for_10_seconds(name):
    model = contactopt.load_model(name)
    result = contactopt.simulate(model, 10.0)
    assert np.isfinite(result.qpos).all() and np.isfinite(result.qvel).all()
    energy = result.total_energy
    allowed = 0.02 * contactopt.total_mass(model) * 9.81 * 1.0 + 0.1
    assert energy.max() - energy[0] <= allowed, f"energy rose by {energy.max() - energy[0]:.3f} J"
    # bounded: kinetic energy at the end is no more than what gravity could have released
    assert result.kinetic_energy[-1] <= energy[0] - energy.min() + allowed


def test_humanoid_falls_and_lies_on_the_floor():
    model = contactopt.load_model("humanoid")
    result = contactopt.simulate(model, 3.0)
    assert result.qpos[0, 2] > 0.8          # starts standing (root height)
    assert result.qpos[-1, 2] < 0.4         # ends lying
    assert result.contact_count[-1] >= 2    # resting on the floor
    assert result.kinetic_energy[-1] < 1.0  # and at rest
