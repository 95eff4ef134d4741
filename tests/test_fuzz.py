"""Property-based fuzzing of the public entry points (issue 26) with Hypothesis.

Property, for every entry point and every generated input: either a :class:`ContactoptError`
subclass is raised, or the result is correct and finite (a divergence or a failed contact solve
may be *reported* — ``RolloutResult.diverged``, a non-converged ``ContactStatus``, a planner
update without a policy — but never a silent NaN and never another exception type).  Cases
that go into MuJoCo's C code with odd models (RK4, no actuators, elliptic cones, zero-mass
bodies, equality constraints, tendons) run in a subprocess, so that a crash fails one test
instead of killing pytest.

Generated inputs: wrong shapes and dtypes, NaN/inf, huge magnitudes (1e300, 1e12), empty and
non-contiguous arrays, lists, None, strings.

Budgets: ``CONTACTOPT_FUZZ=ci`` (default; the whole module runs in well under a minute) or
``CONTACTOPT_FUZZ=long`` (20× the examples), e.g.::

    CONTACTOPT_FUZZ=long python -m pytest -q tests/test_fuzz.py -p no:cacheprovider

The regression tests of the defects the issue listed (and those the fuzzing found) are in
``tests/test_fuzz_regressions.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import mujoco
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contactopt
from contactopt import ContactoptError

FUZZ_PROFILE = os.environ.get("CONTACTOPT_FUZZ", "ci")
if FUZZ_PROFILE not in ("ci", "long"):
    raise ValueError(f"CONTACTOPT_FUZZ must be 'ci' or 'long', got {FUZZ_PROFILE!r}")
_SCALE = 20 if FUZZ_PROFILE == "long" else 1


def fuzz(examples: int):
    """Hypothesis settings of one test: ``examples`` in the CI profile (×20 in the long one)."""
    return settings(max_examples=examples * _SCALE, deadline=None, derandomize=FUZZ_PROFILE == "ci",
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
                    database=None)


# --------------------------------------------------------------------------- generators

HOSTILE_FLOATS = st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300, 1e12, -1e12, 1e-300, 0.0, -0.0])
PLAIN_FLOATS = st.floats(-3.0, 3.0, allow_nan=False)
ANY_FLOATS = st.one_of(PLAIN_FLOATS, HOSTILE_FLOATS, st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def hostile_arrays(draw, shape: tuple[int, ...], base=None):
    """An input meant to have ``shape``: usually that shape with a few hostile entries (around
    ``base`` when given), else a wrong shape, an odd dtype, a non-contiguous view, a list, a
    scalar, None or a string."""
    kind = draw(st.sampled_from(["values"] * 6 + ["shape", "empty", "dtype", "strided", "list", "junk"]))
    size = int(np.prod(shape)) if shape else 1

    def values(n):
        arr = np.zeros(n) if base is None else np.resize(np.asarray(base, dtype=float), n).copy()
        k = draw(st.integers(0, min(n, 3)))
        for _ in range(k):
            arr[draw(st.integers(0, max(n - 1, 0)))] = draw(ANY_FLOATS) if n else 0.0
        return arr

    if kind == "values":
        return values(size).reshape(shape)
    if kind == "shape":
        alt = draw(st.sampled_from([(size + 1,), (max(size - 1, 0),), shape + (1,), (1,) + shape, (2, size + 2)]))
        return values(int(np.prod(alt))).reshape(alt)
    if kind == "empty":
        return np.zeros((0,) + shape[1:])
    if kind == "dtype":
        dt = draw(st.sampled_from([np.int64, np.float32, np.bool_, np.complex128, object, "U3"]))
        return np.ones(shape, dtype=dt) if dt != "U3" else np.full(shape, "abc")
    if kind == "strided":  # a non-contiguous view with the right shape
        big = values(2 * size).reshape((2 * size,) if len(shape) <= 1 else (shape[0] * 2,) + shape[1:])
        return big[::2]
    if kind == "list":
        return values(size).reshape(shape).tolist()
    return draw(st.sampled_from([None, "qpos", 3.0, np.nan, {}, b"x", [[1.0, 2.0], [3.0]]]))


def no_silent_nan(*arrays, what: str = "result"):
    """Assert that every array is finite."""
    for a in arrays:
        a = np.asarray(a, dtype=float)
        assert np.all(np.isfinite(a)), f"{what}: a non-finite value returned without an error"


def call(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, or None when it raised a ContactoptError; any other exception fails."""
    try:
        return fn(*args, **kwargs)
    except ContactoptError:
        return None


@pytest.fixture(scope="module")
def humanoid():
    return contactopt.load_model("humanoid")


@pytest.fixture(scope="module")
def acrobot():
    return contactopt.load_model("acrobot")


# --------------------------------------------------------------------------- load_model


@fuzz(100)
@given(st.one_of(
    st.none(), st.integers(), st.floats(), st.binary(max_size=8), st.lists(st.integers(), max_size=2),
    st.sampled_from(["", " ", ".", "/", "..", "~", "humanoid.xml", "nope/x.xml", "x.mjb", "\0", "acrobot "]),
    st.text(max_size=12),
))
def test_load_model_names(name):
    try:
        model = contactopt.load_model(name)
    except ContactoptError:
        return
    except ValueError as exc:  # an embedded NUL byte in a path: the OS-level error is a ValueError
        pytest.fail(f"load_model({name!r}) raised {type(exc).__name__}: {exc}")
    assert isinstance(model, mujoco.MjModel)


@fuzz(30)
@given(st.sampled_from([
    "", "<mujoco", "<mujoco/>", "<robot/>", "<mujoco><worldbody><body><geom size='-1'/></body></worldbody></mujoco>",
    "<mujoco><option timestep='nan'/></mujoco>", "<mujoco><option timestep='-1'/></mujoco>",
    "<mujoco><worldbody><geom type='sphere' size='1e300'/></worldbody></mujoco>", "\x00\xff garbage",
]), st.sampled_from([".xml", ".urdf", ".mjb", ".mjcf"]), st.one_of(st.none(), ANY_FLOATS))
def test_load_model_bad_files(tmp_path_factory, text, suffix, timestep):
    path = tmp_path_factory.mktemp("m") / f"bad{suffix}"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    model = call(contactopt.load_model, path, timestep=timestep)
    if model is not None:
        assert model.opt.timestep > 0 and np.isfinite(model.opt.timestep)


# --------------------------------------------------------------------------- simulate


@fuzz(80)
@given(data=st.data())
def test_simulate(acrobot, data):
    m = acrobot
    seconds = data.draw(st.one_of(st.sampled_from([0.0, 0.01, 0.03, -1.0, np.nan, np.inf, 1e-9, "1", None]),
                                  st.floats(0.0, 0.04)))
    kwargs = {}
    if data.draw(st.booleans()):
        kwargs["qpos"] = data.draw(hostile_arrays((m.nq,)))
    if data.draw(st.booleans()):
        kwargs["qvel"] = data.draw(hostile_arrays((m.nv,)))
    kwargs["keyframe"] = data.draw(st.sampled_from(["home", None, 0, 5, -1, "nope"]))
    kwargs["contact"] = data.draw(st.sampled_from(["mujoco", "mujoco", "convex", "bogus"]))
    if data.draw(st.booleans()):
        u = data.draw(hostile_arrays((m.nu,)))
        kwargs["controller"] = lambda model, d: u
    res = call(contactopt.simulate, m, seconds, **kwargs)
    if res is not None:
        no_silent_nan(res.qpos, res.qvel, res.ctrl, res.total_energy, what="simulate")
        assert np.all(np.abs(res.qvel) <= 1e10)


# --------------------------------------------------------------------------- convex contact model


@pytest.fixture(scope="module")
def convex(humanoid):
    from contactopt.contact import ConvexDynamics

    return ConvexDynamics(humanoid)


def _check_contact_step(step, *arrays):
    from contactopt.contact import ContactStatus

    if step.status == ContactStatus.CONVERGED:
        no_silent_nan(*arrays, step.f, what="converged contact step")


@fuzz(60)
@given(data=st.data())
def test_convex_forward(humanoid, convex, data):
    m = humanoid
    q0 = m.key_qpos[0] if m.nkey else m.qpos0
    qpos = data.draw(hostile_arrays((m.nq,), base=q0))
    qvel = data.draw(hostile_arrays((m.nv,)))
    ctrl = data.draw(st.one_of(st.none(), hostile_arrays((m.nu,))))
    step = call(convex.forward, qpos, qvel, ctrl=ctrl)
    if step is not None:
        _check_contact_step(step, step.qpos, step.qvel)


@fuzz(60)
@given(data=st.data())
def test_convex_inverse(humanoid, convex, data):
    m = humanoid
    q0 = m.key_qpos[0] if m.nkey else m.qpos0
    qpos = data.draw(hostile_arrays((m.nq,), base=q0))
    qvel = data.draw(hostile_arrays((m.nv,)))
    qvel_next = data.draw(hostile_arrays((m.nv,)))
    step = call(convex.inverse, qpos, qvel, qvel_next)
    if step is not None:
        _check_contact_step(step, step.qfrc)


@fuzz(100)
@given(data=st.data())
def test_contact_space_forward_inverse(data):
    """The contact-space maps on a generated single-contact problem (A, c / v, μ, v_min, R)."""
    from contactopt.contact import ContactStatus, ConvexContactModel

    model = ConvexContactModel()
    n = 3
    A = data.draw(hostile_arrays((n, n), base=np.eye(n).ravel()))
    given_v = data.draw(hostile_arrays((n,)))
    mu = data.draw(hostile_arrays((1,), base=[0.8]))
    v_min = data.draw(hostile_arrays((1,), base=[-0.1]))
    R = data.draw(hostile_arrays((n,), base=[0.1, 0.1, 0.1]))
    method = data.draw(st.sampled_from(["forward", "inverse"]))
    sol = call(getattr(model, method), A, given_v, friction=mu, v_min=v_min, R=R)
    if sol is not None and sol.status == ContactStatus.CONVERGED:
        no_silent_nan(sol.f, sol.v, sol.c, what=f"contact-space {method}")


# --------------------------------------------------------------------------- MuJoCo dynamics


@pytest.fixture(scope="module")
def acrobot_dynamics(acrobot):
    from contactopt.dynamics import MujocoDynamics

    dyn = MujocoDynamics(acrobot, nthread=1)
    yield dyn
    dyn.close()


@fuzz(80)
@given(data=st.data())
def test_mujoco_dynamics_rollout(acrobot_dynamics, data):
    dyn = acrobot_dynamics
    x0 = data.draw(hostile_arrays((dyn.nx,)))
    T = data.draw(st.integers(0, 5))
    U = data.draw(hostile_arrays((T, dyn.nu)))
    res = call(dyn.rollout, x0, U)
    if res is not None:
        if res.diverged:  # reported: the rows after the divergence are NaN by contract
            return
        no_silent_nan(res.X, res.U, what="rollout")
        if res.U.shape[0]:  # zero steps echo x0: nothing MuJoCo could reset
            assert np.all(np.abs(res.X) <= 1e10)


@fuzz(50)
@given(data=st.data())
def test_mujoco_dynamics_step_and_derivatives(acrobot_dynamics, data):
    dyn = acrobot_dynamics
    x = data.draw(hostile_arrays((dyn.nx,)))
    u = data.draw(hostile_arrays((dyn.nu,)))
    nxt = call(dyn.step, x, u)
    if nxt is not None:
        no_silent_nan(nxt, what="step")
    X = data.draw(hostile_arrays((3, dyn.nx)))
    U = data.draw(hostile_arrays((2, dyn.nu)))
    out = call(dyn.derivatives, X, U)
    if out is not None:
        no_silent_nan(*out, what="derivatives")


# --------------------------------------------------------------------------- solvers


@fuzz(50)
@given(data=st.data())
def test_ilqg_solve_linear(data):
    """iLQG on a 2-state linear-quadratic problem with generated x0, U_init and options."""
    from contactopt.costs import LinearQuadraticCost
    from contactopt.dynamics import LinearDynamics
    from contactopt.solvers import ILQG, ILQGSettings

    A = np.array([[1.0, 0.1], [0.0, 1.0]])
    B = np.array([[0.0], [0.1]])
    x0 = data.draw(hostile_arrays((2,), base=[1.0, 0.0]))
    U = data.draw(hostile_arrays((data.draw(st.integers(1, 6)), 1)))
    max_iter = data.draw(st.sampled_from([None, 1, 5, 0, -1]))
    try:
        settings_ = ILQGSettings(max_iterations=data.draw(st.sampled_from([3, 10, 0, -2])))
        solver = ILQG(LinearDynamics(A, B), LinearQuadraticCost(np.eye(2), np.eye(1), np.eye(2)), settings_)
    except ContactoptError:
        return
    res = call(solver.solve, x0, U, max_iterations=max_iter)
    if res is not None:
        no_silent_nan(res.X, res.U, what="iLQG solve")


@pytest.fixture(scope="module")
def pendulum_task():
    return contactopt.load_task_file(os.path.join(os.path.dirname(__file__), "..", "examples", "pendulum",
                                                  "pendulum_task.py"))


@pytest.fixture(scope="module")
def pendulum_planners(pendulum_task):
    from contactopt import planners

    made = {}
    for name in planners.names():
        extra = {"static_check": False} if name == "gdd" else {}
        made[name] = planners.make(name, pendulum_task, horizon=0.2, **extra)
    yield made
    for p in made.values():
        p.close()


@fuzz(60)
@given(data=st.data())
def test_planner_reset_update(pendulum_task, pendulum_planners, data):
    """Every planner's ``reset``/``update`` (its solver's ``solve``) on generated plant states."""
    name = data.draw(st.sampled_from(sorted(pendulum_planners)))
    planner = pendulum_planners[name]
    m = pendulum_task.load_plant() if not hasattr(test_planner_reset_update, "_m") else test_planner_reset_update._m
    test_planner_reset_update._m = m
    nx = m.nq + m.nv + m.na
    x = data.draw(hostile_arrays((nx,)))
    t = data.draw(st.one_of(st.just(0.0), HOSTILE_FLOATS))
    method = data.draw(st.sampled_from(["reset", "update"]))
    if method == "update":
        call(planner.reset, 0.0, np.zeros(nx))
    upd = call(getattr(planner, method), t, x)
    if upd is not None and upd.policy is not None:
        u = call(upd.policy.control, 0.0, np.zeros(nx))
        if u is not None:
            no_silent_nan(u, what=f"{name}.{method} policy control")


# --------------------------------------------------------------------------- Task and planners.make


def _good_cost(model):
    from contactopt.costs import Control, CostTerm, Qvel

    return [CostTerm(Qvel(model), weight=1.0), CostTerm(Control(model), weight=1e-3)]


TASK_FIELDS = {
    "name": st.one_of(st.text(max_size=5), st.none(), st.integers()),
    "model": st.sampled_from(["acrobot", "", None, 3, "nope.xml", "/", "humanoid"]),
    "cost": st.sampled_from([_good_cost, None, 3, "cost", lambda m: None, lambda m: [1, 2], lambda m: 1 / 0]),
    "duration": st.one_of(ANY_FLOATS, st.sampled_from([0, -1, "5", None])),
    "success_hold": st.one_of(ANY_FLOATS, st.sampled_from(["x", None])),
    "horizon": st.one_of(st.none(), ANY_FLOATS, st.just("1")),
    "planner_timestep": st.one_of(st.none(), ANY_FLOATS),
    "planner_options": st.sampled_from([{}, None, [], {"ilqg": 3}, {"nope": {}}, {"ilqg": {"bogus": 1}}]),
    "initial_state": st.sampled_from([None, "home", "nope", 3, lambda m, d, r: None]),
    "success": st.sampled_from([None, 3, lambda m, d: True]),
}


@fuzz(100)
@given(st.fixed_dictionaries({}, optional=TASK_FIELDS))
def test_task_construction(fields):
    fields.setdefault("name", "t")
    fields.setdefault("model", "acrobot")
    fields.setdefault("cost", _good_cost)
    task = call(contactopt.Task, **fields)
    if task is None:
        return
    assert task.duration > 0 and np.isfinite(task.duration)
    model = call(task.load_plant)
    if model is not None:
        call(task.cost_terms, model)


@pytest.fixture(scope="module")
def acrobot_task():
    return contactopt.Task(name="acrobot-still", model="acrobot", cost=_good_cost, duration=1.0)


OPTION_VALUES = st.one_of(ANY_FLOATS, st.integers(-10**12, 10**12), st.text(max_size=4), st.none(), st.booleans(),
                          st.sampled_from([[1, 2], {}, "auto", "1e9", "nan", "true", object()]))


@fuzz(60)
@given(data=st.data())
def test_planners_make_options(acrobot_task, data):
    from contactopt import planners

    name = data.draw(st.sampled_from([*planners.names(), "nope", ""]))
    keys = ["horizon", "planner_timestep", "iterations", "max_iterations", "seed", "weight.nope", "static_check",
            "bogus", "", "weight.", "terminal.x"]
    try:
        keys += [k for k, _, _ in planners.settings_help(name, acrobot_task)]
    except ContactoptError:
        pass
    options = data.draw(st.dictionaries(st.sampled_from(keys), OPTION_VALUES, max_size=3))
    planner = call(planners.make, name, acrobot_task, **options)
    if planner is not None:
        planner.close()


# --------------------------------------------------------------------------- CLI


CLI_TOKENS = st.sampled_from([
    "models", "simulate", "run", "bench", "tasks", "--json", "--seconds", "--timestep", "--keyframe", "--planner",
    "--set", "--contact", "--kappa", "--width", "--height", "--fps", "--video", "--plot", "--seed", "--model",
    "acrobot", "humanoid", "nope", "", "-1", "nan", "inf", "1e9", "0", "0.01", "x=1", "horizon=nan",
    "ilqg", "idto", "gdd", "convex", "mujoco", "--help", "-h", "--", "é", "/tmp/nope/x.mp4", "out.txt",
])


def _cli(argv):
    from contactopt.cli import main

    try:
        return main(argv)
    except SystemExit as exc:  # argparse: usage errors exit 2, --help exits 0
        assert exc.code in (0, 2), f"main({argv}) exited with {exc.code!r}"
        return exc.code


@fuzz(150)
@given(st.lists(CLI_TOKENS, max_size=6))
def test_cli_parser(capsys, argv):
    """Any argv through the parser: a namespace or an argparse usage exit, nothing else."""
    from contactopt.cli import build_parser

    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        assert exc.code in (0, 2)
    capsys.readouterr()


@fuzz(60)
@given(st.lists(st.sampled_from(["--seconds", "--timestep", "--keyframe", "--contact", "--kappa", "--json",
                                 "-1", "nan", "inf", "0", "0.02", "1e-9", "home", "nope", "convex", "mujoco",
                                 "--width", "--fps", "3", "--plot", "/tmp/nope/x.png"]), max_size=5),
       st.sampled_from(["acrobot", "ball", "nope", "", "/", "x.xml"]))
def test_cli_simulate(capsys, tail, model):
    """``contactopt simulate`` with generated options (durations kept short)."""
    argv = ["simulate", model, *tail]
    for i, tok in enumerate(argv[:-1]):  # keep runs short: no duration beyond 0.02 s
        if tok == "--seconds" and argv[i + 1] not in ("-1", "nan", "inf", "0", "0.02", "1e-9"):
            argv[i + 1] = "0.02"
    if "--seconds" not in argv:
        argv += ["--seconds", "0.02"]
    if "--video" in argv:
        return
    code = _cli(argv)
    assert code in (0, 1, 2)
    capsys.readouterr()


@fuzz(40)
@given(st.sampled_from(["nope", "", "acrobot", "humanoid-reach"]),
       st.lists(st.sampled_from(["--planner", "ilqg", "gdd", "nope", "--set", "horizon=nan", "bogus=1",
                                 "horizon=-1", "--seed", "-3", "x", "--lag", "-1", "--slowdown", "nan"]), max_size=5),
       st.sampled_from(["-1", "nan", "0", "inf"]))
def test_cli_run_rejects_bad_input_fast(capsys, task, tail, seconds):
    """``contactopt run`` with a bad duration among generated options: an error (exit 1 or 2),
    never a traceback (the duration is always invalid, so no run starts)."""
    code = _cli(["run", task, *tail, "--seconds", seconds])
    assert code in (1, 2)
    capsys.readouterr()


# --------------------------------------------------------------------------- odd models, in a subprocess

ODD_MODELS = {
    "rk4": """<mujoco><option integrator="RK4"/><worldbody><body><joint name="j" type="hinge"/>
        <geom type="capsule" fromto="0 0 0 0 0 -.5" size=".05"/></body></worldbody>
        <actuator><motor joint="j" ctrlrange="-1 1"/></actuator></mujoco>""",
    "no_actuators": """<mujoco><worldbody><body><joint type="hinge"/>
        <geom type="capsule" fromto="0 0 0 0 0 -.5" size=".05"/></body></worldbody></mujoco>""",
    "elliptic": """<mujoco><option cone="elliptic"/><worldbody><geom type="plane" size="2 2 .1"/>
        <body pos="0 0 .1"><freejoint/><geom type="box" size=".1 .1 .1" condim="6"/></body>
        <body pos=".5 0 .5"><joint name="j" type="slide" axis="0 0 1"/><geom type="sphere" size=".1"/></body>
        </worldbody><actuator><motor joint="j" ctrlrange="-10 10"/></actuator></mujoco>""",
    "zero_mass": """<mujoco><worldbody><body><joint name="j" type="hinge"/>
        <geom type="capsule" fromto="0 0 0 0 0 -.5" size=".05"/>
        <body name="massless" pos="0 0 -.5"><geom type="sphere" size=".05" mass="0"/><site name="tip"/></body>
        <body pos="0 0 -.5"><joint type="slide" axis="1 0 0"/><inertial pos="0 0 0" mass="1e-9" diaginertia="1e-12 1e-12 1e-12"/></body>
        </body></worldbody><actuator><motor joint="j" ctrlrange="-1 1"/></actuator></mujoco>""",
    "equality": """<mujoco><worldbody><geom type="plane" size="2 2 .1"/>
        <body name="a" pos="0 0 1"><joint name="j1" type="hinge"/><geom type="capsule" fromto="0 0 0 .3 0 0" size=".03"/></body>
        <body name="b" pos=".5 0 1"><joint name="j2" type="hinge"/><geom type="capsule" fromto="0 0 0 .3 0 0" size=".03"/></body>
        </worldbody><equality><joint joint1="j1" joint2="j2"/><connect body1="a" body2="b" anchor=".3 0 0"/></equality>
        <actuator><motor joint="j1" ctrlrange="-1 1"/></actuator></mujoco>""",
    "tendon": """<mujoco><worldbody><body><joint name="j1" type="hinge" limited="true" range="-1 1"/>
        <geom type="capsule" fromto="0 0 0 0 0 -.3" size=".03"/><body pos="0 0 -.3">
        <joint name="j2" type="hinge"/><geom type="capsule" fromto="0 0 0 0 0 -.3" size=".03"/></body></body></worldbody>
        <tendon><fixed name="t" limited="true" range="-.5 .5"><joint joint="j1" coef="1"/><joint joint="j2" coef="-1"/>
        </fixed></tendon><actuator><motor tendon="t" ctrlrange="-1 1"/></actuator></mujoco>""",
}

_ODD_SCRIPT = r'''
import json, sys, warnings
import numpy as np, mujoco
warnings.simplefilter("ignore")
import contactopt
from contactopt import ContactoptError
xml, huge = sys.argv[1], float(sys.argv[2])
out = {}
def probe(label, fn):
    try:
        r = fn()
        arrays = r if isinstance(r, tuple) else (r,)
        bad = [a for a in arrays if isinstance(a, np.ndarray) and not np.all(np.isfinite(a))]
        out[label] = "nan" if bad else "ok"
    except ContactoptError as e:
        out[label] = "error:" + type(e).__name__
    except Exception as e:
        out[label] = "OTHER:" + type(e).__name__ + ": " + str(e)[:200]
m = mujoco.MjModel.from_xml_string(xml)
nx = m.nq + m.nv + m.na
x0 = np.concatenate([m.qpos0, np.zeros(m.nv + m.na)])
x0[m.nq] = huge if m.nv else 0.0
probe("simulate", lambda: (lambda r: (r.qpos, r.qvel))(contactopt.simulate(m, 0.02, qvel=x0[m.nq:m.nq + m.nv])))
def convex():
    from contactopt.contact import ConvexDynamics
    cd = ConvexDynamics(m)
    s = cd.forward(m.qpos0, x0[m.nq:m.nq + m.nv])
    i = cd.inverse(m.qpos0, np.zeros(m.nv), s.qvel)
    return (s.qvel, i.qfrc) if s.status == 0 and i.status == 0 else ()
probe("convex", convex)
def rollout():
    from contactopt.dynamics import MujocoDynamics
    d = MujocoDynamics(m, nthread=1)
    r = d.rollout(x0, np.zeros((4, m.nu)))
    A, B = d.derivatives(r.X if not r.diverged else np.tile(np.concatenate([m.qpos0, np.zeros(m.nv + m.na)]), (5, 1)),
                         np.zeros((4, m.nu)))
    return (A, B) + (() if r.diverged else (r.X,))
probe("rollout", rollout)
def ilqg():
    from contactopt.costs import Control, CostTerm, Qvel, StageCost, TrajectoryCost
    from contactopt.dynamics import MujocoDynamics
    from contactopt.solvers import ILQG, ILQGSettings
    dyn = MujocoDynamics(m, nthread=1)
    cost = TrajectoryCost(StageCost(m, [CostTerm(Qvel(m)), CostTerm(Control(m), weight=0.1)]))
    r = ILQG(dyn, cost, ILQGSettings(max_iterations=3)).solve(x0, np.zeros((5, m.nu)))
    return () if r.status.name == "DIVERGED" else (r.X, r.U)  # a reported divergence: NaN rows allowed
probe("ilqg", ilqg)
def gdd():
    from contactopt.solvers.gdd import Cost, Damping, GDDSolver, gdd_step
    d = mujoco.MjData(m)
    d.qvel[:] = x0[m.nq:m.nq + m.nv]
    r = gdd_step(m, d, Cost(Damping(0.1, 5.0)), GDDSolver(m))
    return (d.qpos, d.qvel, r.ctrl)
probe("gdd", gdd)
print(json.dumps(out))
'''


@pytest.mark.parametrize("huge", [0.0, 1e300, 1e12])
@pytest.mark.parametrize("name", sorted(ODD_MODELS))
def test_odd_models_in_subprocess(name, huge):
    """simulate, the convex model, MujocoDynamics rollout/derivatives, iLQG and GDD on a model with
    an odd feature (and an initial velocity of 0, 1e12 or 1e300), in a child process: a crash is
    a failed test; every outcome is a result (finite) or a ContactoptError."""
    proc = subprocess.run(check=False, args=[sys.executable, "-c", _ODD_SCRIPT, textwrap.dedent(ODD_MODELS[name]), repr(huge)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{name}: child process died (rc {proc.returncode}): {proc.stderr[-2000:]}"
    outcomes = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = {k: v for k, v in outcomes.items() if v.startswith("OTHER") or v == "nan"}
    assert not bad, f"{name} (velocity {huge:g}): {bad}"
