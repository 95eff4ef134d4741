"""``hopper`` (IDTO, ``--planner idto``): the footed hopper hops forward to a target.

The model is ``hopper-foot``; the target ``x`` is ``HOPPER_TARGET`` = 0.5 m ahead.  Nominal:
the home pose with the torso ``x`` running toward the target at a fixed speed, anchored to
time (:func:`_hopper_nominal`); no gait is given.  Success when the torso is within
``HOPPER_TOL`` of the target, upright, for 0.5 s, before any fall (torso below 0.4 m or pitch
beyond 0.6 rad, latched).  The task is an :class:`~contactopt.tasks.idto_task.IDTOTask`; the
iLQG hopper task is :mod:`.hopper_hop`.

Experiment log: docs/experiments/hopper-idto.md.
"""

from __future__ import annotations

import mujoco
import numpy as np

from .idto_task import IDTOTask, register_idto_task

__all__ = ["HOPPER"]


HOPPER_HOME = np.array([0.0, 0.63, 0.0, 0.0, 0.0])  # hopper_foot.xml "home": upright, foot flat
HOPPER_TARGET = 0.5  # m ahead of the start (the authors' hopper example: 0.5 m)
HOPPER_SPEED = 0.15  # m/s: the nominal torso x runs toward the target at this speed
HOPPER_LEAD = 0.2  # m: the nominal's start is kept within this of the measured x
HOPPER_TOL = 0.1


def _hopper_nominal(model, T, h):
    """Nominal: the other coordinates at :data:`HOPPER_HOME`; the torso ``x`` runs from
    ``x_0 = clip(HOPPER_SPEED · t, x − HOPPER_LEAD, x + HOPPER_LEAD)`` (``t`` the update's time,
    ``x`` the measured torso ``x``) at :data:`HOPPER_SPEED` and stops at the target; ``v_nom`` is
    its time derivative (``HOPPER_SPEED`` along ``x`` while it runs, 0 elsewhere).

    The reference is anchored to time, not to the measured ``x``: re-anchored at the measured ``x``
    at every update the pull never grows, and the plans settle into a standing or tiptoe lean
    (docs/experiments/hopper-idto.md).  The lead bound keeps a hopper that fell behind from
    lunging."""
    ks = np.arange(T + 1) * h

    def nominal(t, x):
        q = np.tile(HOPPER_HOME, (T + 1, 1))
        start = float(np.clip(min(HOPPER_SPEED * t, nominal.goal), x[0] - HOPPER_LEAD, x[0] + HOPPER_LEAD))
        q[:, 0] = np.minimum(start + HOPPER_SPEED * ks, nominal.goal)
        return q, np.gradient(q, h, axis=0)

    nominal.goal = HOPPER_HOME[0] + HOPPER_TARGET
    return nominal


def _hopper_initial(model, data, rng):
    data.qpos[:] = HOPPER_HOME
    data.qpos[3:] += rng.uniform(-0.05, 0.05, 2)
    data.qvel[:] = 0.0


def _hopper_upright(model, data) -> bool:
    return bool(abs(data.qpos[2]) < 0.6 and data.qpos[1] > 0.4)


def _hopper_success(model, data):
    return bool(abs(data.qpos[0] - (HOPPER_HOME[0] + HOPPER_TARGET)) < HOPPER_TOL and _hopper_upright(model, data))


def _hopper_fell(model, data):
    """Failure (latched by the runner): torso centre below 0.4 m or pitched beyond 0.6 rad — the
    success test's own upright bounds, so a fallen hopper that bounces back up cannot succeed later."""
    return not _hopper_upright(model, data)


def _hopper_metric(model, data):
    return float(abs(data.qpos[0] - (HOPPER_HOME[0] + HOPPER_TARGET)))


def _hopper_flights(model, qpos, clearance=0.005):
    """Flight phases in a recorded ``qpos (N, 5)``: ``(count, fraction of samples)`` with both heel
    and toe more than ``clearance`` [m] above the ground."""
    data = mujoco.MjData(model)
    heel, toe = model.geom("heel").id, model.geom("toe").id
    air = np.empty(len(qpos), dtype=bool)
    for i, q in enumerate(qpos):
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        lowest = min(data.geom_xpos[heel, 2] - model.geom_size[heel, 0], data.geom_xpos[toe, 2] - model.geom_size[toe, 0])
        air[i] = lowest > clearance
    return int(np.sum(air[1:] & ~air[:-1])), float(air.mean()) if air.size else 0.0


def _hopper_report(task, model, result, x0):
    flights, air = _hopper_flights(model, result.qpos)
    return {"distance_m": float(result.qpos[-1, 0] - x0[0]), "target_m": HOPPER_TARGET,
            "flight_phases": flights, "airborne_fraction": air,
            "max_pitch_rad": float(np.max(np.abs(result.qpos[:, 2]))),
            "max_torso_height_m": float(np.max(result.qpos[:, 1]))}


HOPPER = IDTOTask(
    name="hopper", model="hopper-foot",
    description=f"hop forward {HOPPER_TARGET:g} m to a target and stay upright (contact-implicit)",
    # The paper's 2 s horizon (Table II: h 0.05 s, T 40) at h 0.025 s, T 80, updated every h
    # (25 ms, one iteration): the warm start is then the previous plan shifted by exactly one knot.
    # With 10 ms updates on 50 ms knots the shifted guess's linear resampling smooths the impacts
    # and the plans stood still after the first hop (docs/experiments/hopper-idto.md).
    horizon=80, time_step=0.025,
    # x, z, pitch, hip, ankle.  The authors' hopper weights (Q_q 1, Q_v 0.1, R 100 unactuated /
    # 0.1 actuated) with Q_q,x 30 and Q_v,x 1 toward the moving x reference, and no terminal
    # cost: with the authors' Q_f,q 10 / Q_f,v 1 every plan ends in a stop, and the hopper fell
    # when it reached the first plan's stop (at T h; docs/experiments/hopper-idto.md).
    weights=dict(Qq=[30.0, 1.0, 1.0, 1.0, 1.0], Qv=[1.0, 0.1, 0.1, 0.1, 0.1], Qf_q=0.0, Qf_v=0.0,
                 R=[100.0, 100.0, 100.0, 0.1, 0.1], unactuated_penalty=1e3),
    # the paper's hopper contact: k 800 N/m, σ 1 cm, μ 1, v_s 0.05 m/s, v_d 0.1 m/s
    contact=dict(stiffness=800.0, smoothing=0.01, friction=1.0, stiction_velocity=0.05,
                 dissipation_velocity=0.1),
    # the first plan starts from the nominal (x ramped toward the target): from a held standing
    # guess the solver settles on its toe, leaning forward, and never hops
    nominal=_hopper_nominal, initial_guess="nominal", initial_state=_hopper_initial,
    success=_hopper_success, failure=_hopper_fell,
    # the authors' PD gains (K_p 100, K_d 5 on the two motors)
    metric=_hopper_metric, success_hold=0.5, default_seconds=10.0, kp=100.0, kd=5.0, lag=0.025,
    update_period=0.025, rate_target_hz=100.0, initial_iterations=200, report=_hopper_report,
    # Δ_0 = 10 for the first plan; it converges (its radius collapses), and the updates restart
    # from ``restart_radius`` 0.1 (larger restarts: bolder hops; docs/experiments/hopper-idto.md)
    # multipliers="schur": the dense Schur complement its rates were measured with (the default
    # banded KKT system gives the same multipliers to rounding, so a chaotic closed loop takes
    # other paths; not measured again yet)
    solver=dict(underactuation="constrained", initial_radius=10.0, multipliers="schur"),
    restart_radius=0.1,
)


register_idto_task(HOPPER)
