"""Shared fixtures: small hand-written models exercising every joint type; the ``realtime``
marker's guard; the numba warm-up before a parallel run."""

import os

import mujoco
import numpy as np
import pytest

from contactopt.testing import finite_difference_jacobian

pytest_plugins = ["pytester"]  # tests/test_repository.py runs the realtime guard in a child pytest

# A free body, a ball joint, a hinge with a geared motor, a slide, a tendon-driven
# hinge pair and a position servo: every transmission/joint kind the helpers handle.
MIXED_JOINTS_XML = """
<mujoco model="mixed">
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1"/>
    <body name="free" pos="0 0 1">
      <freejoint/>
      <geom type="box" size=".1 .2 .05" mass="2"/>
      <body name="ball" pos="0 0 -.2">
        <joint name="ball" type="ball" damping=".1"/>
        <geom type="capsule" fromto="0 0 0 0 0 -.3" size=".04"/>
        <body name="elbow" pos="0 0 -.3">
          <joint name="hinge" type="hinge" axis="0 1 0" range="-2 2" damping=".1"/>
          <geom type="capsule" fromto="0 0 0 .3 0 0" size=".03"/>
          <body name="slider" pos=".3 0 0">
            <joint name="slide" type="slide" axis="1 0 0" range="-.1 .1"/>
            <geom type="sphere" size=".05"/>
            <site name="tip"/>
          </body>
        </body>
      </body>
    </body>
    <body name="pendulum" pos="1 0 1">
      <joint name="h1" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -.3" size=".03"/>
      <body pos="0 0 -.3">
        <joint name="h2" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -.3" size=".03"/>
      </body>
    </body>
  </worldbody>
  <tendon>
    <fixed name="couple"><joint joint="h1" coef="1"/><joint joint="h2" coef="-0.5"/></fixed>
  </tendon>
  <actuator>
    <motor name="hinge_motor" joint="hinge" gear="3" ctrlrange="-1 1"/>
    <position name="slide_servo" joint="slide" kp="50" ctrlrange="-.1 .1"/>
    <motor name="tendon_motor" tendon="couple" gear="2" ctrlrange="-1 1"/>
  </actuator>
</mujoco>
"""


@pytest.fixture
def mixed_model():
    return mujoco.MjModel.from_xml_string(MIXED_JOINTS_XML)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def random_configuration(model, rng):
    """A random valid configuration: qpos0 perturbed on the manifold."""
    q = model.qpos0.copy()
    mujoco.mj_integratePos(model, q, rng.normal(scale=0.7, size=model.nv), 1.0)
    return q


@pytest.fixture(autouse=True, scope="session")
def _quiet_mujoco_warnings():
    """Keep MuJoCo from writing MUJOCO_LOG.TXT into the working directory during tests."""
    collected = []
    mujoco.set_mju_user_warning(collected.append)
    yield collected


def dense_fd_jacobian(problem, q, step=1e-6):
    """Brute-force Jacobian of an IDTO problem's whole residual vector w.r.t. tangent
    perturbations of ``q`` (central differences): ``(num_residuals, num_variables)``."""
    return finite_difference_jacobian(problem.residuals, q, eps=step, retract=problem.retract,
                                      dim=problem.num_variables)


# --- the ``realtime`` marker ----------------------------------------------------------------
# The README's test command runs the suite in two passes: everything not marked ``realtime`` on
# all cores (pytest-xdist), then the ``realtime`` tests one at a time.  A test is ``realtime`` when
# its outcome depends on the wall clock: an MPC run in async mode or with the measured lag, a
# live GUI or browser, a network client timing a server.  Such a test must not share the machine
# with other tests, so the guard below fails any test that builds async or measured-lag
# MPCSettings without the marker (closed loops at a fixed simulated lag are deterministic and
# run in parallel).

_WALL_CLOCK_SETTINGS: list[str] = []


def pytest_configure(config):
    from contactopt.mpc import runner

    original = runner.MPCSettings.__post_init__

    def recording_post_init(self):
        original(self)
        if self.mode == "async" or self.lag == "measured":
            _WALL_CLOCK_SETTINGS.append(f"mode={self.mode!r}, lag={self.lag!r}")

    runner.MPCSettings.__post_init__ = recording_post_init
    config._contactopt_mpc_post_init = (runner.MPCSettings, original)


def pytest_unconfigure(config):
    saved = getattr(config, "_contactopt_mpc_post_init", None)
    if saved is not None:
        saved[0].__post_init__ = saved[1]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    start = len(_WALL_CLOCK_SETTINGS)
    result = yield
    if len(_WALL_CLOCK_SETTINGS) > start and item.get_closest_marker("realtime") is None:
        pytest.fail(f"{item.nodeid} builds MPCSettings({_WALL_CLOCK_SETTINGS[start]}), whose "
                    "outcome depends on the wall clock: mark it @pytest.mark.realtime (it then "
                    "runs alone, not beside other tests) or give it a fixed lag", pytrace=False)
    return result


# --- numba kernels compiled once, before the parallel workers start ----------------------------
# On a fresh clone no kernel is cached.  Each xdist worker (and each child process a test starts)
# that reaches a kernel family before another process has written it to the cache compiles it
# again: the goal-directed solver alone takes minutes.  The controller therefore compiles every
# family once (contactopt.warmup: one child process per family, as many at once as there are
# workers) before it starts the workers.  On two cores this saves about what it costs (the
# duplicated compiles against the warm-up's idle second core: docs/experiments/ci-time.md), but
# no test then compiles inside its own timeout, and the durations measure the tests.
# CONTACTOPT_TEST_WARMUP=0 turns this off.


@pytest.hookimpl(tryfirst=True)  # before xdist's own sessionstart, which starts the workers
def pytest_sessionstart(session):
    config = session.config
    workers = config.getoption("numprocesses", default=None)
    if (hasattr(config, "workerinput") or not isinstance(workers, int) or workers < 1
            or os.environ.get("CONTACTOPT_TEST_WARMUP", "1") == "0"):
        return
    from contactopt.errors import ContactoptError
    from contactopt.warmup import warm_kernels

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    done = []
    try:
        seconds = warm_kernels(jobs=workers, report=lambda name, s: done.append(f"{name} {s:.0f} s"))
        line = (f"numba kernels compiled or loaded before the workers start: {', '.join(done)} "
                f"({max(seconds.values()):.0f} s)")
    except ContactoptError as exc:  # the tests that use the family fail with the real error
        line = f"numba warm-up failed, the workers compile on first use: {exc}"
    if reporter is not None:
        reporter.write_line(line)
