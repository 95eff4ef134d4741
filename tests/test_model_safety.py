"""No MuJoCo fatal error may end the process; RK4 models work with every planner.

* the planner's copy of an RK4 model integrates with implicitfast (the plant keeps RK4) and a
  ModelNotice says so (``contactopt.model.planner_model_copy``, ``Task.make_planner_model``);
* the entry points of the compiled loops (MujocoDynamics, IDTOProblem, GDDSolver) refuse a model
  that would make a loop hit a MuJoCo fatal error (RK4 under ``mjd_transitionFD`` /
  ``mjd_inverseFD``, a too small ``<size memory>``) with a ModelError, before the loop runs;
* ``contactopt run`` of an RK4 task file runs with every planner, and a too small
  ``<size memory>`` is a one-line error.

The cases that would end the process on a regression run in a subprocess, so that a regression
fails the test instead of killing pytest.
"""

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import mujoco
import numpy as np
import pytest

import contactopt
from contactopt.dynamics import MujocoDynamics
from contactopt.errors import ContactoptError, ModelError, ModelNotice
from contactopt.model import PLANNER_INTEGRATOR, integrator_name, planner_model_copy
from contactopt.native import check_compiled_loops
from contactopt.solvers.gdd import GDDSolver
from contactopt.solvers.idto import IDTOProblem

MODELS = Path(__file__).parent / "models"
RK4_XML = MODELS / "pendulum_rk4.xml"
RK4_TASK = MODELS / "pendulum_rk4_task.py"
RK4 = int(mujoco.mjtIntegrator.mjINT_RK4)
IMPLICITFAST = int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST)


def boxes_xml(memory: str, n: int = 50) -> str:
    """``n`` free boxes resting on a plane (4 contacts each) and one actuated hinge, with
    ``<size memory=memory>``: 1M holds ``mj_forward`` but not ``mjd_transitionFD`` (nv = 301);
    50K holds the model but not its collision pass."""
    bodies = "".join(f'<body pos="{(i % 10) * 0.11} {(i // 10) * 0.11} 0.05"><freejoint/>'
                     f'<geom type="box" size="0.05 0.05 0.05"/></body>' for i in range(n))
    return (f'<mujoco><size memory="{memory}"/><worldbody><geom type="plane" size="5 5 .1"/>{bodies}'
            '<body pos="3 3 1"><joint name="j" type="hinge" axis="0 1 0"/><geom size="0.1"/></body>'
            '</worldbody><actuator><motor joint="j" ctrlrange="-1 1"/></actuator></mujoco>')


def run_python(code: str, cwd, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, check=False)


# --------------------------------------------------------------------------- the planner's copy


def test_planner_copy_switches_rk4_and_leaves_the_plant():
    plant = contactopt.load_model(RK4_XML)
    assert plant.opt.integrator == RK4
    with pytest.warns(ModelNotice, match=r"integrator RK4 .*implicitfast.*plant keeps RK4"):
        m = planner_model_copy(plant, 0.01)
    assert m is not plant
    assert m.opt.integrator == PLANNER_INTEGRATOR == IMPLICITFAST
    assert m.opt.timestep == 0.01
    assert plant.opt.integrator == RK4 and plant.opt.timestep == 0.002
    assert contactopt.model_name(m) == contactopt.model_name(plant)
    # the switched copy runs every derivative the planners take
    check_compiled_loops(m, ("step", "transition_fd", "inverse", "inverse_fd", "forward"))


def test_planner_copy_keeps_supported_integrators_without_a_notice():
    for name in ("Euler", "implicit", "implicitfast"):
        plant = mujoco.MjModel.from_xml_string(RK4_XML.read_text().replace('integrator="RK4"',
                                                                             f'integrator="{name}"'))
        with warnings.catch_warnings():
            warnings.simplefilter("error", ModelNotice)
            m = planner_model_copy(plant)
        assert integrator_name(m) == name and m.opt.timestep == plant.opt.timestep
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelNotice)
        assert planner_model_copy(contactopt.load_model(RK4_XML), notice=False).opt.integrator == IMPLICITFAST
    with pytest.raises(contactopt.ParameterError):
        planner_model_copy(plant, 0.0)


def test_task_planner_model_uses_the_supported_integrator():
    task = contactopt.load_task_file(RK4_TASK)
    plant = task.load_plant()
    with pytest.warns(ModelNotice):
        m = task.make_planner_model(plant, task.timestep(plant))
    assert m.opt.integrator == IMPLICITFAST and plant.opt.integrator == RK4
    assert m.opt.timestep == pytest.approx(0.01)


# --------------------------------------------------------------------------- the guard


def test_guard_refuses_rk4_in_the_derivative_loops():
    plant = contactopt.load_model(RK4_XML)
    with pytest.raises(ModelError, match=r"MujocoDynamics: .*integrator RK4 .*mjd_transitionFD.*"
                                         r"planner_model_copy.*integrator=\"implicitfast\""):
        MujocoDynamics(plant)
    with pytest.raises(ModelError, match=r"IDTOProblem: .*integrator RK4 .*mjd_inverseFD"):
        IDTOProblem(plant, 5, 0.01, np.zeros(1))
    assert isinstance(ModelError("x"), ContactoptError) and isinstance(ModelError("x"), ValueError)
    # the stages of goal-directed dynamics do not integrate: RK4 is fine there
    GDDSolver(plant)
    # the planner's copy works with both
    with pytest.warns(ModelNotice):
        m = planner_model_copy(plant, 0.01)
    dyn = MujocoDynamics(m, nthread=1)
    A, B = dyn.derivatives(np.zeros((4, 2)), np.zeros((3, 1)))
    assert np.all(np.isfinite(A)) and np.all(np.isfinite(B))
    dyn.close()
    IDTOProblem(m, 5, 0.01, np.zeros(1))
    # IDTO's "mujoco" backend integrates its private copy with Euler: RK4 is fine there
    IDTOProblem(plant, 5, 0.01, np.zeros(1), backend="mujoco")


def test_guard_refuses_rk4_under_discrete_inverse():
    plant = contactopt.load_model(RK4_XML)
    plant.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_INVDISCRETE)
    with pytest.raises(ModelError, match="mj_inverse"):
        check_compiled_loops(plant, ("inverse",), what="test")
    with pytest.raises(ValueError, match="unknown call"):
        check_compiled_loops(plant, ("nope",))


def test_guard_turns_a_small_memory_into_a_model_error():
    # 1M: mj_step fits, mjd_transitionFD (nv = 301) does not
    m = mujoco.MjModel.from_xml_string(boxes_xml("1M"))
    check_compiled_loops(m, ("forward", "inverse", "inverse_fd"))
    with pytest.raises(ModelError, match=r"<size memory> \(1 MiB\) is too small for mjd_transitionFD at qpos0"
                                         r".*<size memory=\"\d+M\"/>"):
        MujocoDynamics(m)
    # 50K: not even the collision pass fits
    m = mujoco.MjModel.from_xml_string(boxes_xml("50K"))
    with pytest.raises(ModelError, match=r"GDDSolver: .*<size memory> \(50 KiB\).*mj_forward"):
        GDDSolver(m)
    contact = contactopt.contact.compliant.CompliantContactModel(m)
    with pytest.raises(ModelError, match=r"IDTOProblem: .*<size memory> \(50 KiB\).*mj_fwdPosition"):
        IDTOProblem(m, 3, 0.01, m.qpos0.copy(), contact=contact)


def test_guard_warns_when_the_arena_is_nearly_full():
    # 6M: mjd_transitionFD at qpos0 uses about half of it
    m = mujoco.MjModel.from_xml_string(boxes_xml("6M"))
    with pytest.warns(ModelNotice, match=r"use \d+ % of the model's <size memory>"):
        check_compiled_loops(m, ("transition_fd",), what="test")


def test_horizon_that_cannot_fit_in_memory_is_refused():
    from contactopt.native import check_horizon_memory, memory_limit_bytes

    assert memory_limit_bytes() is None or memory_limit_bytes() > 0
    check_horizon_memory("test", 100, 1 << 20, fix="shorten it", limit_bytes=1 << 30)
    with pytest.raises(ModelError, match=r"test: a horizon of 2000 steps needs about 1.95 GiB .*1 GiB.*shorten it"):
        check_horizon_memory("test", 2000, 1 << 20, fix="shorten it", limit_bytes=1 << 30)
    m = contactopt.load_model("humanoid")
    with pytest.raises(ModelError, match=r"IDTOProblem: a horizon of \d+ steps .*shorten the horizon"):
        IDTOProblem(m, 10**9, 0.01, m.qpos0)


def test_small_memory_is_an_error_not_a_process_exit(tmp_path):
    """The crash-prone case end to end in a subprocess: without the guard the compiled
    finite-difference loop would end the process (exit 1, MUJOCO_LOG.TXT)."""
    code = f"""
        import numpy as np, mujoco
        from contactopt.dynamics import MujocoDynamics
        from contactopt.errors import ModelError
        m = mujoco.MjModel.from_xml_string({boxes_xml("1M")!r})
        try:
            dyn = MujocoDynamics(m, nthread=1)
        except ModelError as exc:
            print("MODEL_ERROR", exc)
        else:
            dyn.derivatives(np.tile(np.r_[m.qpos0, np.zeros(m.nv)], (3, 1)), np.zeros((2, m.nu)))
            print("NO_ERROR")
    """
    proc = run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MODEL_ERROR" in proc.stdout and "<size memory" in proc.stdout
    assert "ERROR" not in proc.stderr
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


# --------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("planner", [
    "ilqg",
    pytest.param("idto", marks=pytest.mark.slow),
    pytest.param("gdd", marks=pytest.mark.slow),
])
def test_cli_runs_an_rk4_task_with_every_planner(tmp_path, planner):
    extra = ["--set", "static_check=false"] if planner == "gdd" else []  # 2 N·m cannot hold it level
    proc = subprocess.run([sys.executable, "-m", "contactopt", "run", str(RK4_TASK), "--planner", planner,
                           "--seconds", "0.2", *extra], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 3), out  # 3: ran, the task not solved in 0.2 s
    assert "integrator RK4" in proc.stderr and "implicitfast" in proc.stderr  # the notice
    assert "ERROR" not in out and "Traceback" not in out
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_cli_small_memory_is_a_one_line_error(tmp_path):
    (tmp_path / "boxes.xml").write_text(boxes_xml("1M"))
    (tmp_path / "boxes_task.py").write_text(textwrap.dedent("""
        import contactopt
        from contactopt.costs import Control, CostTerm, Qvel
        TASK = contactopt.Task(name="boxes", model="boxes.xml", duration=0.1,
                               cost=lambda m: [CostTerm(Qvel(m), weight=1.0), CostTerm(Control(m), weight=1e-3)])
    """))
    proc = subprocess.run([sys.executable, "-m", "contactopt", "run", "boxes_task.py", "--planner", "ilqg"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("contactopt: error: MujocoDynamics: ") and "<size memory" in lines[-1], proc.stderr
    assert "Traceback" not in proc.stderr and "ERROR:" not in proc.stderr
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


@pytest.mark.parametrize("planner", ["ilqg", "idto", "gdd"])
def test_a_model_without_actuators_is_refused_with_the_fix(tmp_path, planner):
    import contactopt
    from contactopt.costs import CostTerm, Qvel
    from contactopt.errors import ModelError
    from contactopt.planners import make

    xml = tmp_path / "passive.xml"
    xml.write_text('<mujoco><worldbody><body><joint type="hinge"/><geom size="0.1"/></body></worldbody></mujoco>')
    task = contactopt.Task(name="passive", model=str(xml), cost=lambda m: [CostTerm(Qvel(m))],
                           success=lambda m, d: False, duration=1.0)
    with pytest.raises(ModelError, match=r"no actuators.*add an <actuator>"):
        make(planner, task)
