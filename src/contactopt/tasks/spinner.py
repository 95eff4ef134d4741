"""``spinner``: keep the damped spinner turning with a 2-link finger.

The target is always 2 rad ahead of the spinner's current angle (a ramp over the horizon),
the finger's nominal pose is its home pose.  Reports ``radians_per_10s``; success when it
reaches ``SPINNER_MIN_RAD_PER_10S``.  Two forms of the one scenario:

* ``--planner idto`` runs :data:`SPINNER`, an :class:`~contactopt.tasks.idto_task.IDTOTask`
  (the IDTO paper's weights and contact, Tables I–II);
* the planner-independent :class:`~contactopt.Task` :data:`SPINNER_TASK` (what the GUI, the
  policy server and the other planners run) states the same ramp in the shared cost language:
  a :class:`~contactopt.costs.Qpos` whose target follows a reference re-anchored at each plan's
  measured angle (:meth:`~contactopt.costs.Residual.with_reference`), with the IDTO weights
  (``Q = w/2``) and the paper's contact and solver settings as the ``idto`` planner options.

Experiment log: docs/experiments/spinner-idto.md.
"""

from __future__ import annotations

import math

import numpy as np

import weakref

from .idto_task import IDTOTask, register_idto_task

__all__ = ["SPINNER", "SPINNER_TASK"]


SPINNER_HOME = np.array([0.3, 1.5, 0.0])
SPINNER_AHEAD = 2.0  # rad: the target is always this far ahead of the current angle
SPINNER_MIN_RAD_PER_10S = 3.0


def _spinner_nominal(model, T, h):
    frac = np.linspace(0.0, 1.0, T + 1)

    def nominal(t, x):
        q = np.tile(SPINNER_HOME, (T + 1, 1))
        q[:, 2] = x[2] + SPINNER_AHEAD * frac
        v = np.zeros((T + 1, 3))
        v[:, 2] = SPINNER_AHEAD / (T * h)
        return q, v

    return nominal


def _spinner_initial(model, data, rng):
    data.qpos[:] = SPINNER_HOME + np.array([*rng.uniform(-0.05, 0.05, 2), rng.uniform(-math.pi, math.pi)])
    data.qvel[:] = 0.0


def _spinner_metric(model, data):
    return float(data.qpos[2])


def _spinner_success(model, data):
    return False  # needs the start angle and the run's length: see _spinner_success_factory


def _spinner_success_factory(x0, seconds):
    """Success once the spinner has gained ``SPINNER_MIN_RAD_PER_10S · seconds/10`` rad."""
    need = SPINNER_MIN_RAD_PER_10S * seconds / 10.0

    def success(model, data):
        return bool(data.qpos[2] - x0[2] >= need)

    return success


def _spinner_report(task, model, result, x0):
    gained = float(result.qpos[-1, 2] - x0[2])
    dur = max(float(result.simulated_time), 1e-9)
    return {"radians_gained": gained, "radians_per_10s": gained * 10.0 / dur,
            "required_radians_per_10s": SPINNER_MIN_RAD_PER_10S}


SPINNER = IDTOTask(
    name="spinner", model="spinner",
    description="keep the damped spinner turning with a 2-link finger (target 2 rad ahead; finger gaiting)",
    horizon=40, time_step=0.05,
    # Table II (spinner): Q_q 1/1, Q_f,q 10/10, Q_v 0.1, Q_f,v 0.1, R 0.1 (actuated), 1000 (unactuated)
    weights=dict(Qq=1.0, Qv=0.1, Qf_q=10.0, Qf_v=0.1, R=0.1, unactuated_penalty=1e3),
    # Table I (spinner): k 200 N/m, σ 1 cm, μ 0.5, v_s 0.05 m/s
    contact=dict(stiffness=200.0, smoothing=0.01, friction=0.5, stiction_velocity=0.05,
                 dissipation_velocity=0.1),
    nominal=_spinner_nominal, initial_state=_spinner_initial, success=_spinner_success,
    # replans at the paper's 200 Hz (Table III); the fixed 5 ms lag is above the measured
    # update time (~2 ms) (docs/experiments/idto-mpc-rates.md)
    metric=_spinner_metric, default_seconds=10.0, kp=20.0, kd=2.0, lag=0.005, update_period=0.005,
    rate_target_hz=200.0, initial_iterations=50, report=_spinner_report,
    success_factory=_spinner_success_factory,
    # The paper's spinner MPC uses the Lagrange-multiplier (equality-constrained) method; with
    # the penalty the plan leans on unactuated forces and never makes real contact.
    # Δ_0 = 10 (the notes' default is 0.1): a lower first-plan cost
    # (docs/experiments/spinner-idto.md).
    solver=dict(underactuation="constrained", initial_radius=10.0),
)


# --------------------------------------------------------------------------- the Task form

SPINNER_HORIZON = 2.0  # s: the IDTO task's 40 knots of 50 ms

#: the spinner angle each plant ``MjData`` started from (weakly keyed: one entry per live run)
_START_ANGLE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _task_initial(model, data, rng):
    _spinner_initial(model, data, rng)
    _START_ANGLE[data] = float(data.qpos[2])


def _task_success(model, data) -> bool:
    """The spinner has turned ``SPINNER_MIN_RAD_PER_10S`` rad (3 rad, the 10 s run's requirement)
    beyond the angle this run started from."""
    start = _START_ANGLE.get(data)
    return start is not None and float(data.qpos[2]) - start >= SPINNER_MIN_RAD_PER_10S


def _ahead(model):
    def reference(t, t0, x0):
        """The home pose, the spinner ``SPINNER_AHEAD`` rad ahead of ``x0`` by the horizon's end."""
        q = np.array([*SPINNER_HOME[:2], x0[2] + SPINNER_AHEAD * (t - t0) / SPINNER_HORIZON])
        return q

    return reference


def _task_cost(model, *, terminal: bool = False):
    from ..costs import Control, CostTerm, Qpos, Qvel

    # IDTO's Q_q, Q_v, R (Table II) as shared weights w = 2Q; the velocity target is the ramp's rate
    wq, wv = (20.0, 0.2) if terminal else (2.0, 0.2)
    terms = [CostTerm(Qpos(model, reference=_ahead(model), name="ahead"), weight=wq),
             CostTerm(Qvel(model, target=[0.0, 0.0, SPINNER_AHEAD / SPINNER_HORIZON]), weight=wv)]
    if not terminal:
        terms.append(CostTerm(Control(model), weight=0.2))
    return terms


def _spinner_task():
    from ..task import Task

    return Task(
        name="spinner", model="spinner", cost=_task_cost,
        terminal_cost=lambda model: _task_cost(model, terminal=True),
        initial_state=_task_initial, success=_task_success, duration=10.0,
        horizon=SPINNER_HORIZON, planner_timestep=0.05, metric=_spinner_metric,
        description=SPINNER.description,
        planner_options={"idto": dict(
            underactuation="constrained", trust_radius=10.0, kp=20.0, kd=2.0, initial_iterations=50, samples=0,
            contact_stiffness=200.0, contact_smoothing=0.01, contact_friction=0.5,
            contact_stiction_velocity=0.05, contact_dissipation_velocity=0.1)})


SPINNER_TASK = _spinner_task()

register_idto_task(SPINNER, task_factory=lambda: SPINNER_TASK)
