"""IDTO contact-implicit MPC tasks of the seed paper: spinner, hopper, acrobot (``--planner idto``).

Each task is an :class:`IDTOTask`: the IDTO problem (horizon ``T``, step ``h``, diagonal
weights, compliant contact parameters of Table I/II), the nominal trajectory — re-anchored
at the measured state at every update where the task asks for it — the PD gains of the
tracking policy, the seeded initial state and the success test on the plant.  The plant
is the bundled MuJoCo model with MuJoCo's own contact; the compliant contact model is only
the planner's.  :func:`run_idto_task` runs one closed loop through
:func:`contactopt.mpc.run_mpc` (sync mode: a fixed policy lag of one replan period).

Tasks:

* ``spinner`` — keep the damped spinner turning: the target is always 2 rad ahead of its
  current angle (a ramp over the horizon), the finger's nominal pose is its home pose.
  Reports ``radians_per_10s``; success when it reaches ``SPINNER_MIN_RAD_PER_10S``.
* ``hopper`` — hop forward to a target ``x`` ahead (nominal: a hopping gait whose torso
  position moves toward the target at a bounded speed, re-anchored at the measured ``x``, its
  phase pulled toward the measured touchdown timing);
  success when the torso is within ``HOPPER_TOL`` of the target, upright, for 0.5 s, before
  any fall (torso below 0.8 m or pitch beyond 0.5 rad, latched).
* ``acrobot`` — swing up from hanging and balance (no contact; the unactuated shoulder is
  penalized, penalty method); success when the tip stays above 3.9 m for 1 s.  Tested
  (``tests/test_idto_mpc.py``): the balance half from 0.05 rad off upright (fast), and the
  full swing-up and balance for seed 1 (slow).

Status: ``spinner`` succeeds (finger gaiting emerges: a periodic strike–withdraw cycle);
``acrobot`` succeeds for 8 of seeds 0–7 in 20 s runs (upright reached at 5.4–6.6 s) and 7 of
the held-out seeds 8–15 in 10 s runs; ``hopper`` does not succeed.  Measured in sync mode, fixed
lag = update period = 10 ms unless named; variants are :func:`run_idto_task` overrides of the
task's fields:

* ``acrobot`` (not one of the paper's examples — its Table III has spinner, hopper,
  quadruped, bi-manual and Allegro; the authors' code has an acrobot example: 2 s horizon,
  h 0.05 s, Q_q 1, Q_v 1, Q_f,q 100, Q_f,v 1, R 0.1 on the elbow, constrained, PD 100/10;
  as trajectory optimization, ``mpc: false``).  Here the elbow has ±5 N·m.
  Current settings: ``h`` 0.02 s, ``T`` 150 (3 s horizon), 2 solver iterations per update.
  ``contactopt run acrobot --planner idto --seed N --json``: seeds 0–7 in 20 s all succeed
  (success from 5.39–6.58 s, i.e. also within the default 10 s), seeds 8–15 in 10 s: 7/8 (seed 9
  succeeds at 10.0 s, in a 20 s run).  The update takes 6.5–11 ms (median, this machine; p95
  8–20 ms) against the 10 ms lag, ~2.5 ms with the previous ``T`` 100 and one iteration.
  What made the difference, seeds 0–7 in 20 s: ``T`` 100 / 1 iteration (the previous default)
  1/8 (seed 1, 8.72 s; seeds 8–15 in 10 s: 1/8); ``T`` 150 / 2 iterations 8/8; ``T`` 150 / 3
  iterations 8/8.  Each change alone was 0–1 of 3 seeds (below).  Sensitive to the lag: ``T``
  150 / 2 iterations with lag = update period = 20 ms: 0/8.
  Soft actuator limits (``IDTOProblem(actuator_limit_weight=w)``, the elbow's ±5 N·m in the
  cost; not used by default): they do keep the plans within the limit (open loop, ``T`` 150,
  ``w`` 1000: peak 5.03 N·m, terminal ``q`` 2.93 rad), but did not raise the success rate:
  ``T`` 100 / 1 iteration, ``w`` 10 / 100 / 1000: 1/8 each; ``w`` 100 with ``R`` 0.1: 2/8, with
  ``R`` 0.01: 0/8; ``w`` 100, margin 0.2: 0/8; ``T`` 150: ``w`` 100 with ``R`` 0.1 0/8, ``w``
  1000 3/8; ``T`` 150, ``w`` 1000, 3 iterations: 6/8, 2 iterations: 8/8 (the same as without);
  with a 20 ms lag 1/8.  At ``T`` 100 the limited plans cannot reach upright within the 2 s
  horizon (open loop: terminal shoulder angle 1.4–1.9 rad instead of π), and in closed loop
  the warm-started plans put large torques on their first step (the measured state is off the
  plan; elbow 35–120 N·m there) whatever the weight.
  Before these settings (``T`` 100, one iteration), ``contactopt run acrobot --planner idto
  --seed N --json`` (10 s), seed 0 / 1 / 2 → success
  False / True (8.72 s) / False; closest tip metric 2.00 / 0.17 / 0.16 m.  Seeds 0 and 2
  still fail in 30 s (seed 0 stays folded, seed 2 passes 0.16 m from the target and falls
  away); a 5 ms lag (the update takes ~2.5 ms) gives the same 1/3.
  The two changes that made seed 1 succeed (before: 0/3, closest metric 0.52 / 0.57 / 1.60):

  - ``h`` 0.05 → 0.02 s with ``T`` 40 → 100 (same 2 s horizon).  At 0.05 s the swing-up
    plans exploit the coarse steps (the elbow crosses ~3 rad in two knots); evaluated with
    ``mj_inverse`` along the policy's cubic splines at 5 ms, the first plan needs shoulder
    torques of rms 56 N·m (peak 340) — nothing a plant with an unactuated shoulder can track:
    that plan followed open loop ends at ``q`` ≈ (1.0, −0.6) instead of (2.9, 0).  At 0.02 s:
    rms 8 N·m; at 0.01 s: rms 2.8.  (0.01 s with ``T`` 200 was 0/3 in 20 s; 0.025 s with
    ``T`` 80, 0/3.)  The first plan now gets 300 iterations (was 200; all runs above used 300).
  - Winding hysteresis in the nominal (:data:`ACROBOT_REWIND`).  Re-picking the nearest
    upright winding at every update made the target jump by 2π whenever a hinge passed ±π from
    it; with ``h`` 0.02 the elbow then spun through 80 rad at full torque.  With the
    hysteresis and the old ``h`` 0.05 the closed loop instead settles folded (metric ≈ 2.2,
    3/3), so the two changes only help together.  ``ACROBOT_REWIND`` ∞ or 2π: the same 1/3
    (seed 1); 1.2π: 0/3.

  The balance half is robust; the catch is the limit.  Started ``±δ`` (uniform, both joints)
  from upright at rest: δ = 0.05 rad 3/3 seeds recover, 0.1 2/3, 0.15 2/3 (``h`` 0.05 s:
  3/3, 2/3, 1/3, and 0/3 at 0.3); a saturated (±5 N·m) discrete LQR on the same plant: 2/3,
  1/3, 1/3, 0/3.  So the swing-up must arrive within ~0.1 rad almost at rest, and IDTO, which
  has no torque limits (by default: see the soft limits above), plans swing-ups needing 9–16 N·m
  peaks (clipped on the plant).
  Tried at ``h`` 0.02, ``T`` 100 without gain (all 0–1 of 3 seeds, seed 1 only): ``R`` 3
  (0/3); ``Q_f,v`` 1 (1/3); running ``Q_q`` 1 (0/3); ``Q_f,q`` 1000 (0/3); constrained
  (0/3); the authors' weights with ``k_p, k_d`` 100/10 (0/3); ``k_p, k_d`` 50/5 (1/3);
  2 iterations per update (1/3); ``T`` 125 (0/3), ``T`` 150 with ``R`` 3 or 10 (1/3 held
  then lost, 0/3), ``T`` 200 with ``R`` 5 or 10 (0/3).  Earlier, at ``h`` 0.05 s without the
  hysteresis (all 0/3 in 12 s): running ``Q_q`` 1 or 10; ``R`` 0.1; unactuated penalty
  10³; 3 iterations per update; ``Q_v`` 1.  A quadratic-cost IDTO has no energy-shaping term
  like the iLQG ``acrobot-swingup`` task's, so the swing-up rests on the local solver finding
  a pumping plan the clipped plant can follow.
* ``hopper`` (does not succeed; 0/8 seeds).  ``timeout 600 contactopt run hopper --planner idto
  --seconds 6 --seed N --json``, seeds 0–7, current settings (``T`` 25, 4 iterations per update,
  soft actuator limits, taper 0.15 s, gait phase re-anchored in flight): falls
  (``time_of_failure``) at 2.27 / 2.19 / 3.17 / 5.28 / 1.65 / 2.37 / 2.47 / 4.63 s (median 2.4),
  hopping in place or drifting until then (torso ``x`` at the fall 0.33 / −0.47 / −1.02 / 0.14 /
  −0.04 / 0.27 / 0.40 / −0.42 m; the target is at 1 m); seeds 8–15 (same command): 2.61 / 1.37 /
  5.99 / 0.85 / 2.99 / 1.63 / 1.52 / 2.60 s.  Update 6.5–13 ms median (p95 8–32 ms, loaded
  machine) against the 20 ms lag.  Before (``T`` 50, 1 iteration, no limits, taper 0.3 s, gait on
  absolute time): 0.89 / 1.55 / 0.88 / 1.18 / 1.20 / 0.85 / 1.26 / 0.77 s (0.43–1.55 s after an
  FP-level change in ``idto/contact.py`` elsewhere: the closed loop is chaotic), seeds 8–15:
  1.08 / 1.96 / 0.57 / 1.33 / 1.04 / 1.35 / 1.18 / 1.12 s.  What each change did (fall times,
  seeds 0–7 unless named, 6 s runs of the same closed loop stopped at the fall):

  - ``T`` 25 with 4 iterations, taper 0.15 s (T 50 / 1 iteration before), without the limits and
    the phase re-anchoring: 1.21–3.18 s (median 2.0; seeds 8–15: median 1.4); likewise T 25 / 5
    iterations 1.05–3.45; T 30 / 4: 0.77–1.94; T 35 / 3: 0.6–1.2; T 20 / 6: 0.41–1.57; T 50 / 10
    (~70 ms per update): 0.97–5.87, no forward progress either (``x`` ≤ 0.74 m).  With both: T 25 /
    8 iterations (20–30 ms, too slow): 1.34–2.72.
  - Soft actuator limits (``actuator_limit_weight`` 10, margin 0.2) on top: 0.76–2.60 s without the
    phase re-anchoring (seeds 0–15, median 1.5); with it the current 1.65–5.28.  Weight 3: 0.67–3.13;
    100: 0.66–1.25; margin 0.3: 0.68–4.3.
  - Phase re-anchoring (:func:`_hopper_nominal`; 0.02 s per update): the one seeded success seen
    (seed 0 at 1.93 s, ``x`` 0.97 m, without the limits; seed 6 upright through 6 s at ``x`` 0.11
    m) — not repeatable: rates 0.01 / 0.05 s gave 0/8 (1.1–4.4 s).
  - No gain (all 0/8).  At the previous settings (``T`` 50, 1 iteration): warm-start tail
    extrapolated at constant velocity instead of the held last knot (0.43–1.42 s; at T 25 / 4
    iterations without the taper: 0.42–3.29); resetting the trust radius after the first plan (no
    change); a cubic-Hermite correction of the warm start to the measured ``q, v`` over 10 knots
    (0.15–0.49 s); max trust radius 1 or 5 (0.43–1.16); the penalty method (0.75–1.56); lag
    compensation — planning from the state predicted 20 ms ahead with the previous policy on the
    MuJoCo model (0.27–1.0 s); a foot trajectory with zero ground speed at lift-off / touchdown
    (0.44–1.23; at T 25 / 4 iterations 0.71–1.18).  At T 25 / 4 iterations without the limits and
    the phase re-anchoring: Q_v,x 3 (0.76–3.52), Q_q,hip 10 (0.74–1.59).  At the current settings:
    zero lag (0.43–3.45: worse, like the lag compensation — the first knots of every plan are its
    least consistent part); ``v_0`` as the backward difference of the last two measured ``q``
    (IDTO's own velocity definition) instead of ``qvel`` (0.67–4.19; the step-0 violation stays
    50–700 N); Raibert foot placement (offset k (v − v_d), k 0.1 / 0.2 s: 0.74–2.55); the nominal
    hip compensated by the measured pitch (0.66–4.61); an absolute ``x`` reference (max 0.3 m
    lead) with Q_q,x 10 or 30 (0.39–2.40: pushing forward harder falls sooner); Q_q,x 30 (0.43–
    1.69); Q_v,x 2 (0.80–4.01); Q_v,pitch 1 (0.48–0.85); PD 300/20 (0.67–1.66); ``HOPPER_SPEED``
    0.3 (0.78–4.19) or 0.2 (0.68–3.55); flight 0.15 s (0.55–1.72); the planner's stiction
    velocity 0.1 m/s (seeds 0–15: 0.42–4.84, two upright through 6 s) or 0.2 (seeds 0–15: 0.67–4.67,
    one upright through 6 s), k 5000
    N/m with σ 1 cm (0.62–2.87) or 10000 N/m (0.66–5.52); dogleg scaling "sqrt" or "none"
    (0.83–4.16).  Hopping in place (``HOPPER_SPEED`` 0) also falls (0.42–3.85 s) and drifts up to
    1.1 m, so balance, not the forward drive, is what fails first.
  - Why (scratch diagnostics): with 1–4 iterations per update the plans stay dynamically
    inconsistent — unactuated-row violations of 20–450 N (the whole robot weighs 77 N), largest at
    step 0 — and the first converged plan (T 50) moves forward only 0.12 m in 1 s against a
    nominal 0.43 m.  Re-solving warm starts captured in a run (seed 0, T 50): 30 iterations bring
    the violation to 3–70 N in the first 0.8 s, but leave 200–280 N later.
  The previous settings (standing nominal ``HOPPER_HOME`` with ``x`` ramped, ``h`` 0.05 s, ``T`` 40,
  update / lag 10 ms, k 5000 N/m, σ 1 cm, PD 30/3) fell (same test) at 0.15 / 0.07 / 0.39 /
  0.42 / 0.06 / 1.04 / 0.19 / 0.06 s, without a single hop.  Diagnosis that led to the gait
  nominal (scratch scripts, seeds 0–1 unless named; "current" there is the ``T`` 50, 1-iteration
  setting that came before the present one):

  - The plans never hopped: from a held standing guess the solver stays in a non-hopping local
    minimum whatever the nominal — a torso height nominal above the straight-leg height (1.2 m,
    Q_q,z 100: the plan stands straight), a sinusoidal height / knee gait as nominal and guess
    (k 800, 2000, 5000 or 20000 N/m, v_d 0.1–0.5, up to 1000 iterations, penalty or constrained:
    a crouch-and-bounce without flight).  It keeps a hop when the guess has one (a jump recorded
    on the plant: flight kept, converged in 50 iterations).  What worked: a nominal that is a
    physically consistent gait (:func:`_hopper_gait`: half-sine stance force, ballistic flight,
    leg retracted and swung by inverse kinematics, 0.2 s stance / 0.2 s flight, 4.9 cm apex) used
    as the first guess too, with the leg weights Q_q 30 and R 10⁻⁴ on the motors.  The first plan
    then converges (violation 0.06 N) with flight phases (seed 0: foot up to 11 cm, 10 of the 51
    knots more than 2 cm above the ground, torso up to 1.07 m; ``tests/test_idto_mpc.py``).
  - Open loop the plans are trackable: the first plan replayed on the plant with PD +
    feedforward stays within 1 cm (standing plan, ``h`` 0.01, 0.9 s) and within 0.03 rad of
    pitch while hopping (``h`` 0.02, 0.9 s).  The contact mismatch is therefore not what fails.
  - Closed loop, the warm starts were the trouble: the shifted guess violated the unactuated rows
    by 200–1600 N at every update — (a) linear resampling between knots (update 10 ms on 50 or
    20 ms knots) moves the stiff contact's impacts between knots (1624 N at a touchdown knot),
    hence update period = ``h``; (b) the resampler holds the last knot (``v_T`` → 0; 200–900 N when
    the plan still moves at the end), hence the taper to rest and Q_f,v 10 (left: 20–60 N);
    (c) the measured state is off the plan at step 0 (50–120 N; the seeded leg angles leave the
    foot up to 5.7 mm in the air or in the ground); (d) the first solve left the trust radius at
    0.003, hence ``min_radius`` 0.01.  With ``h`` 0.05 the first plans also straightened the knee
    to −0.27 rad (no joint limits in the planner) and the PD then pushed the plant's knee into its
    limit (−45 N·m), pitching the torso over in 0.08 s.
  - The gains mattered most once the plans hop: with the gait nominal at 50 Hz (10 iterations per
    update) k_p, k_d 10/1: falls at 0.33 / 0.27 s; 30/3: 0.92 / 0.88; 100/5: 0.79 / 0.78; 200/10:
    upright 2 s / 1.15; 200/20 and 300/10: upright through 3 s (2/2); 400/20: 3 s / 0.42.
  - Iterations per update (PD 200/20, seeds 0–7, 6 s): 1 (current, the paper's): 0.77–1.55 s;
    10: 1.98 / 2.53 / 1.95 / 0.82 / 1.04 / 0.41 / 5.98 / 5.09 s (seeds 0 and 1 were upright through
    3 s in an earlier 3 s run: the closed loop is chaotic, FP-level differences change the fall
    time) — but 10 iterations take ~70 ms against the 20 ms lag.  3 iterations: 0.41–1.45 s
    (seeds 0–3).
  - Tried without gain, gait nominal, fall times of seeds 0/1 unless named.  At 50 Hz, 10
    iterations, PD 30/3: Q_v,pitch 5: 0.29 / 0.28 s; Q_q,pitch 200: 0.66 / 0.75; soft actuator
    limits (w 10, margin 0.2): 0.81 / 0.39; shorter flights (0.15 s) at 0.4 m/s, with the limits:
    0.74 / 0.82; 0.3 m/s: 0.88 / 0.80.  At PD 200/20 (10 iterations unless named): ``h`` 0.01 s,
    ``T`` 100, 100 Hz, 5 iterations: 0.75 / 0.75 (PD 30/3, 1 or 10 iterations: 0.14–0.39);
    Q_q,x 30–50 (faster forward): 0.4–2.05 s; Q_v,x 5: 2.0 / 0.4; Raibert foot placement from
    the measured speed in the nominal (k_v 0.05 / 0.1 s, 5 iterations): 0.8–2.0 s (seeds 0–2);
    Q_q,hip 5 (free foot placement): one seed upright 4 s and 0.64 m forward, others 0.4–2.6 s;
    that with the foot placed on the ground at the start and a 0.8 s ramp-in, 1 iteration, seeds
    0–7, 6 s: 1.11 / 1.27 / 1.26 / 1.19 / 1.64 / 0.41 / 1.28 / 1.24 s (not clearly better than the
    current settings; a 1.2 s ramp-in: 0.85 / 1.56 / 1.15, seeds 0–2).  ``h`` 0.02 s with 10 ms
    updates (PD 30/3, 1 iteration): 0.46 / 0.49.
  - How it falls: the hops drift (forward or back) and a landing comes with the foot behind or
    ahead of the body; during flight the plans then ask for 100–460 N·m at the hip (the motor
    gives 100) to re-place the leg, and the next stance pitches the torso over.  (The phase
    re-anchoring and the soft limits of the present settings were tried on this: above.)
  Earlier, with the standing nominal: ``HOPPER_TARGET = 0`` (pure balance, 3 s): torso below
  0.6 m after 0.74 / 0.66 s (seeds 0/1); ``h`` 0.025 s, ``T`` 80: 0.27 / 0.20 s; ``h`` 0.02 s,
  ``T`` 50: 0.61 / 0.53 s; ``h`` 0.01 s, ``T`` 100: 0.75 / 0.50 s (with ``k_p, k_d`` 100/5: 0.56 /
  0.86 s, flipping over); ``k_p, k_d`` 150/10: 0.27 / 0.70 s; the paper's k = 800 N/m: 0.63 /
  0.62 s; starting and nominal torso height at the planner's compliant equilibrium: 0.39 / 0.17 s,
  with 3 iterations per update 0.51 / 0.18 s; the weights of the authors' hopper example (Q_q 1,
  Q_v 0.1, R 0.1 actuated / 100 unactuated, Q_f,q 10, Q_f,v 1, PD 100/5; their example is a
  different, 0.61 m hopper, run as trajectory optimization): 0.34 / 0.38 s, and with k = 800 N/m
  0.31 / 0.39 s; knee Q_q 50 (no hyperextension): 0.08 / 0.10 s (same test as above); a standing
  nominal with ``h`` 0.01, ``T`` 100 and 20 iterations per update stood 1.5 s (2/2) but moving
  forward it only fell forward (no hops).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import mujoco
import numpy as np

from ..errors import ParameterError
from . import register_task

__all__ = ["IDTOTask", "TASKS", "build_idto_planner", "run_idto_task", "idto_runner",
           "SPINNER", "HOPPER", "ACROBOT"]


@dataclass(frozen=True)
class IDTOTask:
    """A closed-loop IDTO MPC task.

    Attributes:
      name, model, description, default_seconds: registry entries.
      horizon: planner steps ``T``; time_step: ``h`` [s].
      weights: keyword arguments of :class:`~contactopt.idto.IDTOProblem` (``Qq, Qv, R, Qf_q,
        Qf_v, unactuated_penalty``; scalars or ``(nv,)``).
      contact: keyword arguments of :class:`~contactopt.idto.ContactParameters` (plus optional
        ``bodies``), or None for a contact-free task.
      nominal: ``(model, T, h) -> nominal(t, x) -> (q_nom (T+1, nq), v_nom (T+1, nv))``.
      initial_state: ``(model, data, rng)`` sets ``data.qpos``/``qvel`` from a seeded generator.
      success: ``(model, data) -> bool`` on the plant; success_hold: seconds it must hold.
      failure: optional ``(model, data) -> bool`` failure test on the plant (e.g. "fell"),
        latched at its first true (see :func:`~contactopt.mpc.run_mpc`).
      initial_guess: optional ``(model, T, h) -> initial_guess(t, x) -> q (T+1, nq)``: the first
        plan's starting trajectory (default: ``q`` held; see :class:`~contactopt.mpc.IDTOPlanner`).
      planner_model: optional ``(model) -> None`` that edits the planner's own model before
        the problem is built (e.g. collision filters the compliant model should see); the
        plant is never edited.
      metric: ``(model, data) -> float`` recorded on the plant.
      kp, kd: policy gains along each actuator's direction (``(nu,)`` or scalar).
      lag: sync-mode policy lag [s] (one replan period at the paper's MPC rate);
      update_period: simulated seconds between update starts (≥ lag).
      rate_target_hz: the paper's MPC rate (Table III), for the report.
      initial_iterations, iterations_per_update: solver iterations.
      solver: extra :class:`~contactopt.idto.SolverOptions` fields.
      report: ``(task, model, result, x0) -> dict`` the task's own measures.
      success_factory: optional ``(x0, seconds) -> success(model, data)`` for tests that depend
        on the initial state and the run's length (replaces ``success``).
    """

    name: str
    model: str
    description: str
    horizon: int
    time_step: float
    weights: dict
    nominal: Callable
    initial_state: Callable
    success: Callable
    contact: dict | None = None
    metric: Callable | None = None
    success_hold: float = 0.0
    default_seconds: float = 10.0
    kp: object = 0.0
    kd: object = 0.0
    lag: float = 0.01
    update_period: float = 0.01
    rate_target_hz: float = 100.0
    initial_iterations: int = 50
    iterations_per_update: int = 1
    solver: dict = field(default_factory=dict)
    report: Callable | None = None
    success_factory: Callable | None = None
    failure: Callable | None = None
    planner_model: Callable | None = None
    initial_guess: Callable | None = None


def _load(name: str):
    from ..model import load_model
    return load_model(name)


def build_idto_planner(task: IDTOTask, model: mujoco.MjModel | None = None, *, workers: int | None = None,
                       **overrides):
    """The :class:`~contactopt.mpc.idto_planner.IDTOPlanner` of ``task`` (``overrides``: fields of the task).

    ``workers``: threads differentiating time steps in parallel (``IDTOProblem(workers=...)``);
    None keeps the task's setting (its ``weights`` may name one; default 1).
    """
    from ..idto import ContactModel, ContactParameters, IDTOProblem, SolverOptions
    from ..mpc.idto_planner import IDTOPlanner

    bad = set(overrides) - set(IDTOTask.__dataclass_fields__)
    if bad:
        raise ParameterError(f"unknown IDTO task option(s): {', '.join(sorted(bad))}")
    if overrides:
        import dataclasses
        task = dataclasses.replace(task, **overrides)
    m = _load(task.model) if model is None else model
    if task.planner_model is not None:
        if model is not None:
            m = copy.deepcopy(m)  # the caller's model stays as it is
        task.planner_model(m)
    contact = None
    if task.contact is not None:
        cp = dict(task.contact)
        bodies = cp.pop("bodies", None)
        contact = ContactModel(m, ContactParameters(**cp), bodies=bodies)
    q0 = m.qpos0.copy()
    kwargs = dict(task.weights)
    if workers is not None:
        kwargs["workers"] = workers
    problem = IDTOProblem(m, task.horizon, task.time_step, q0, contact=contact, **kwargs)
    options = SolverOptions(**{"convergence": None, **task.solver})
    return IDTOPlanner(problem, plant_model=m, options=options, initial_iterations=task.initial_iterations,
                       iterations_per_update=task.iterations_per_update,
                       nominal=task.nominal(m, task.horizon, task.time_step), kp=task.kp, kd=task.kd,
                       initial_guess=None if task.initial_guess is None
                       else task.initial_guess(m, task.horizon, task.time_step))


def run_idto_task(task: IDTOTask, *, seconds: float | None = None, seed: int = 0, mode: str = "sync",
                  lag=None, slowdown: float = 1.0, update_period: float | None = None, pushes=(),
                  stop_on_success: bool = False, mass_scale: float = 1.0, friction_scale: float = 1.0,
                  **overrides):
    """Run ``task`` closed loop with IDTO MPC.

    Args:
      seconds: simulated duration (default ``task.default_seconds``); seed: seeds the initial state.
      mode, lag, slowdown: see :class:`~contactopt.mpc.MPCSettings` (lag default: the task's fixed lag).
      update_period: sync mode: simulated seconds between updates (default the task's).
      pushes: :class:`~contactopt.mpc.Push` es on the plant.
      mass_scale, friction_scale: model errors of the plant only (:func:`~contactopt.mpc.perturb_model`).
      overrides: fields of ``task`` (e.g. ``horizon``, ``kp``).

    Returns:
      ``(MPCResult, plant_model, x0)`` with ``x0`` the initial ``[qpos, qvel]``.
    """
    from ..mpc import MPCSettings, perturb_model, run_mpc

    bad = set(overrides) - set(IDTOTask.__dataclass_fields__)
    if bad:
        raise ParameterError(f"unknown IDTO task option(s): {', '.join(sorted(bad))}")
    if overrides:  # the plant side (success, metric, failure, lag, ...) sees them too
        import dataclasses
        task = dataclasses.replace(task, **overrides)
    seconds = task.default_seconds if seconds is None else float(seconds)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ParameterError(f"seconds must be positive, got {seconds}")
    plant = _load(task.model)
    if mass_scale != 1.0 or friction_scale != 1.0:
        plant = perturb_model(plant, mass_scale=mass_scale, friction_scale=friction_scale)
    data = mujoco.MjData(plant)
    task.initial_state(plant, data, np.random.default_rng(seed))
    mujoco.mj_forward(plant, data)
    x0 = np.concatenate([data.qpos, data.qvel])
    planner = build_idto_planner(task, _load(task.model))
    settings = MPCSettings(duration=seconds, mode=mode, lag=task.lag if lag is None else lag,
                           update_period=task.update_period if update_period is None else float(update_period),
                           slowdown=slowdown, pushes=tuple(pushes), success_hold=task.success_hold,
                           stop_on_success=stop_on_success)
    success = task.success if task.success_factory is None else task.success_factory(x0, seconds)
    result = run_mpc(planner, plant, data, settings, success=success, metric=task.metric, failure=task.failure)
    return result, plant, x0


def idto_runner(task: IDTOTask):
    """The ``contactopt run`` runner of ``task`` with the IDTO planner."""

    def run(*, seconds=None, seed=0, video=None, plot=None, mode="sync", slowdown=1.0, lag=None, pushes=(),
            mass_scale=1.0, friction_scale=1.0, **kw):
        from .mpc_task import write_outputs

        result, plant, x0 = run_idto_task(task, seconds=seconds, seed=seed, mode=mode, slowdown=slowdown,
                                          lag=lag, pushes=pushes, mass_scale=mass_scale,
                                          friction_scale=friction_scale, **kw)
        report = {"task": task.name, "planner": "idto", **result.summary()}
        it = result.iteration_ms()
        report["mpc_rate_hz"] = float(1e3 / np.median(it)) if it.size else None
        report["mpc_rate_target_hz"] = task.rate_target_hz
        report["horizon_steps"] = task.horizon
        report["time_step"] = task.time_step
        report["seed"] = seed
        if task.report is not None:
            report.update(task.report(task, plant, result, x0))
        return write_outputs(report, task.name, plant, result, video, plot)

    run.task = task
    return run


# =========================================================================== spinner

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
    metric=_spinner_metric, default_seconds=10.0, kp=20.0, kd=2.0, lag=0.02, update_period=0.02,
    rate_target_hz=200.0, initial_iterations=50, report=_spinner_report,
    success_factory=_spinner_success_factory,
    # The paper's spinner MPC uses the Lagrange-multiplier (equality-constrained) method; with
    # the penalty the plan leans on unactuated forces and never makes real contact.
    solver=dict(underactuation="constrained"),
)


# =========================================================================== hopper

HOPPER_HOME = np.array([0.0, 1.0142, 0.0, -0.3, 0.6])
HOPPER_TARGET = 1.0  # m ahead of the start
HOPPER_SPEED = 0.5  # m/s: the nominal torso x moves toward the target at most this fast
HOPPER_TOL = 0.15
#: The nominal hopping gait (module docstring): stance and flight durations [s], torso height at
#: touchdown / take-off [m], leg retraction at mid-flight [m], the ramp [s] from the standing
#: pose into the gait at the start of the run, and the taper [s] back to standing at the end of
#: each horizon (the resampled warm start holds the last knot, so a plan that ends at rest is
#: consistent with it).  Phase re-anchoring (:func:`_hopper_nominal`): while the measured foot is
#: more than ``phase_clearance`` [m] above the ground (after the ramp), the gait's phase moves by at
#: most ``phase_rate`` [s] per update toward a touchdown at the ballistic prediction.
HOPPER_GAIT = dict(stance=0.2, flight=0.2, touchdown_height=1.03, retract=0.08, ramp=0.4, taper=0.15,
                   phase_rate=0.02, phase_clearance=0.01)
_HOPPER_LINK = 0.4  # thigh and shank length (hopper.xml)
_HOPPER_HIP = 0.2  # hip below the torso centre
_HOPPER_FOOT = 0.05  # foot sphere radius
_G = 9.81


def _hopper_leg_ik(dx, dz):
    """``(hip, knee)`` placing the foot centre at ``(dx, dz)`` from the hip (torso upright; knee ≥ 0)."""
    L = np.minimum(np.hypot(dx, dz), 2 * _HOPPER_LINK - 1e-3)
    knee = 2 * np.arccos(L / (2 * _HOPPER_LINK))
    return np.arctan2(-dx, -dz) - knee / 2, knee


def _hopper_gait(tt, vx, weight):
    """Torso height, hip and knee of the nominal gait at times ``tt`` with forward speeds ``vx``.

    Stance (foot fixed on the ground, the hip passing over it at ``vx``) has a half-sine ground
    force ``F(τ) = F_max sin(π τ/T_s)`` whose impulse carries the weight over one period, so the
    torso height is the exact integral of ``z̈ = F/m − g`` from touchdown to take-off; flight is
    ballistic (``v_0 = g T_f / 2``) with the leg retracted and swung forward to the next
    touchdown point.  ``t = 0`` is mid-stance.  ``weight ∈ [0, 1]`` blends from the standing pose
    :data:`HOPPER_HOME` (0) to the gait (1).
    """
    g = HOPPER_GAIT
    Ts, Tf, z_td = g["stance"], g["flight"], g["touchdown_height"]
    P = Ts + Tf
    v0 = _G * Tf / 2
    fmax = math.pi * _G * P / (2 * Ts)  # F_max / m
    ph = np.mod(tt + Ts / 2, P)
    stance = ph < Ts
    tau = np.minimum(ph, Ts)
    tf = ph - Ts
    z = np.where(stance,
                 z_td - v0 * tau + fmax * (Ts / math.pi) * (tau - (Ts / math.pi) * np.sin(math.pi * tau / Ts))
                 - _G * tau ** 2 / 2,
                 z_td + v0 * tf - _G * tf ** 2 / 2)
    half = vx * Ts / 2  # foot ahead of the hip at touchdown (neutral point)
    s = np.clip(tf / Tf, 0.0, 1.0)
    dx = np.where(stance, half - vx * ph, -half + half * (1 - np.cos(math.pi * s)))
    leg = np.hypot(half, z_td - _HOPPER_HIP - _HOPPER_FOOT) - g["retract"] * np.sin(math.pi * s)
    dz = np.where(stance, _HOPPER_FOOT - (z - _HOPPER_HIP), -np.sqrt(np.maximum(leg ** 2 - dx ** 2, 1e-6)))
    hip, knee = _hopper_leg_ik(dx, dz)
    home = HOPPER_HOME
    return (weight * z + (1 - weight) * home[1], weight * hip + (1 - weight) * home[3],
            weight * knee + (1 - weight) * home[4])


def _hopper_touchdown_in(model, data, x) -> float | None:
    """Seconds until the foot of the measured state ``x`` lands, falling ballistically with the torso
    (leg held), or None while it is within ``HOPPER_GAIT["phase_clearance"]`` of the ground."""
    data.qpos[:] = x[:model.nq]
    mujoco.mj_kinematics(model, data)
    gap = float(data.site("foot").xpos[2]) - _HOPPER_FOOT
    if gap <= HOPPER_GAIT["phase_clearance"]:
        return None
    vz = float(x[model.nq + 1])
    return (vz + math.sqrt(vz * vz + 2 * _G * gap)) / _G


def _hopper_nominal(model, T, h):
    """Hopping-gait nominal: torso ``x`` from the measured ``x`` toward the target at
    :data:`HOPPER_SPEED` (re-anchored at every update), pitch 0, height / hip / knee of
    :func:`_hopper_gait`, ramped in over ``HOPPER_GAIT["ramp"]`` s and tapered back to the standing
    pose at rest over the last ``HOPPER_GAIT["taper"]`` s of the horizon.

    The gait runs on ``t + nominal.phase`` (absolute time plus an offset, 0 at the first plan).
    While the measured foot is in the air (after the ramp) the offset moves by at most
    ``HOPPER_GAIT["phase_rate"]`` s per update toward the phase that puts the gait's next touchdown
    at the ballistic prediction (:func:`_hopper_touchdown_in`), so the nominal follows the plant's
    hop timing instead of fighting it."""
    ks = np.arange(T + 1) * h
    g = HOPPER_GAIT
    taper = g["taper"]
    w_end = np.clip((T * h - ks) / taper, 0.0, 1.0) if taper > 0 else np.ones(T + 1)
    ramp = g["ramp"]
    period = g["stance"] + g["flight"]
    data = mujoco.MjData(model)

    def nominal(t, x):
        x = np.asarray(x, dtype=float)
        if t <= 0.0:
            nominal.phase = 0.0
        elif t > ramp and g["phase_rate"] > 0:
            land = _hopper_touchdown_in(model, data, x)
            if land is not None:
                # signed gait time past touchdown at the predicted landing (0: on time)
                err = np.mod(t + land + nominal.phase + g["stance"] / 2 + period / 2, period) - period / 2
                nominal.phase -= float(np.clip(err, -g["phase_rate"], g["phase_rate"]))
        dist = nominal.goal - x[0]
        q = np.zeros((T + 1, 5))
        q[:, 0] = x[0] + np.sign(dist) * np.minimum(np.cumsum(np.r_[0.0, HOPPER_SPEED * w_end[:-1] * h]),
                                                    abs(dist))
        vx = np.gradient(q[:, 0], h)
        w = np.minimum(w_end, np.clip((t + ks) / ramp, 0.0, 1.0)) if ramp > 0 else w_end
        q[:, 1], q[:, 3], q[:, 4] = _hopper_gait(t + nominal.phase + ks, vx, w)
        return q, np.gradient(q, h, axis=0)

    nominal.goal = HOPPER_HOME[0] + HOPPER_TARGET
    nominal.phase = 0.0
    return nominal


def _hopper_initial_guess(model, T, h):
    """The first plan starts from the nominal gait (from a held standing pose the solver stays in
    a non-hopping local minimum: module docstring)."""
    nominal = _hopper_nominal(model, T, h)
    return lambda t, x: nominal(t, x)[0]


def _hopper_initial(model, data, rng):
    data.qpos[:] = HOPPER_HOME
    data.qpos[3:] += rng.uniform(-0.05, 0.05, 2)
    data.qvel[:] = 0.0


def _hopper_upright(model, data) -> bool:
    return bool(abs(data.qpos[2]) < 0.5 and data.qpos[1] > 0.8)


def _hopper_success(model, data):
    return bool(abs(data.qpos[0] - (HOPPER_HOME[0] + HOPPER_TARGET)) < HOPPER_TOL and _hopper_upright(model, data))


def _hopper_fell(model, data):
    """Failure (latched by the runner): torso below 0.8 m or pitched beyond 0.5 rad — the success
    test's own upright bounds, so a fallen hopper that bounces back up cannot succeed later."""
    return not _hopper_upright(model, data)


def _hopper_metric(model, data):
    return float(abs(data.qpos[0] - (HOPPER_HOME[0] + HOPPER_TARGET)))


def _hopper_report(task, model, result, x0):
    return {"distance_m": float(result.qpos[-1, 0] - x0[0]), "target_m": HOPPER_TARGET,
            "max_pitch_rad": float(np.max(np.abs(result.qpos[:, 2]))),
            "max_torso_height_m": float(np.max(result.qpos[:, 1]))}


HOPPER = IDTOTask(
    name="hopper", model="hopper",
    description=f"hop forward {HOPPER_TARGET:g} m to a target and stay upright (contact-implicit)",
    # h 0.02 s, T 25 (0.5 s horizon; the paper: 0.05 s, 2 s).  The update period equals h so the
    # warm start is the previous plan shifted by exactly one knot: with 10 ms updates on 20 or
    # 50 ms knots the linear resampling between knots puts the stiff contact's impacts between
    # knots and the shifted guess violates the unactuated rows by up to ~1600 N (module docstring).
    # T 25 with 4 iterations per update (update 6.5–13 ms median) instead of T 50 with 1 (~5 ms): the
    # warm-started plans stay closer to dynamically consistent; median fall time 1.2 → 2.4 s.
    horizon=25, time_step=0.02, iterations_per_update=4,
    # x, z, pitch, hip, knee: the height and the leg track the gait (z 300, hip/knee 30), x and
    # pitch are held loosely; R is tiny on the motors (the hops need ~50–100 N·m) — R on the
    # unactuated rows is inert (constrained method).  Q_f,v 10: the plan ends at rest (taper).
    # Soft actuator limits (weight 10, 20 % margin): the plans asked for 100–460 N·m at the hip
    # (the motor gives 100).
    weights=dict(Qq=[10.0, 300.0, 50.0, 30.0, 30.0], Qv=0.1, Qf_q=[10.0, 100.0, 50.0, 10.0, 10.0], Qf_v=10.0,
                 R=[1.0, 1.0, 1.0, 1e-4, 1e-4], unactuated_penalty=1e3, actuator_limit_weight=10.0,
                 actuator_limit_margin=0.2),
    # the paper's hopper: k 800 N/m, σ 1 cm, μ 1.0, v_s 0.05 m/s.  Chosen k = 20000 N/m, σ 5 mm:
    # the planner's foot sinks ~1.5 mm under the weight and ~1.2 cm at the push-off peak (k 800:
    # 9.5 cm, k 5000 / σ 1 cm: 1.3 / 3.9 cm) — the plant's ground is nearly rigid.
    contact=dict(stiffness=20000.0, smoothing=0.005, friction=1.0, stiction_velocity=0.05,
                 dissipation_velocity=0.1),
    nominal=_hopper_nominal, initial_guess=_hopper_initial_guess, initial_state=_hopper_initial,
    success=_hopper_success, failure=_hopper_fell,
    # k_p, k_d 200 / 20 (was 30 / 3): median time upright 0.2 → 1.0 s with this gait (docstring)
    metric=_hopper_metric, success_hold=0.5, default_seconds=6.0, kp=200.0, kd=20.0, lag=0.02,
    update_period=0.02, rate_target_hz=100.0, initial_iterations=300, report=_hopper_report,
    # min_radius 0.01: a collapsed trust region restarts at Δ_0 (IDTOPlanner) instead of
    # carrying a 0.003 radius from the first solve into the updates
    solver=dict(underactuation="constrained", min_radius=0.01),
)


# =========================================================================== acrobot

ACROBOT_UP = np.array([math.pi, 0.0])


ACROBOT_REWIND = 1.5 * math.pi  # rad: re-pick a hinge's upright winding only this far from it


def _acrobot_nominal(model, T, h):
    """Upright nominal ``q = (π + 2π k_0, 2π k_1)`` held over the horizon (``v_nom`` = 0).

    Both hinges are 2π-periodic; the winding ``k_j`` is the one nearest the measured angle at
    the first plan (``t ≤ 0``) and afterwards changes only when the measured angle is more than
    :data:`ACROBOT_REWIND` from the current target (hysteresis: re-picking the nearest winding
    at every update flips the target by 2π whenever a hinge passes ±π from it, and the warm-started
    plan then chases the new winding — the elbow was seen spinning through 80 rad at full torque).
    """
    q = np.tile(ACROBOT_UP, (T + 1, 1))
    two_pi = 2 * math.pi

    def nominal(t, x):
        k = nominal.winding
        near = np.round((np.asarray(x[:2]) - ACROBOT_UP) / two_pi)
        if k is None or t <= 0.0:
            k = near
        else:
            far = np.abs(x[:2] - (ACROBOT_UP + two_pi * k)) > ACROBOT_REWIND
            k = np.where(far, near, k)
        nominal.winding = k
        return q + two_pi * k, None

    nominal.winding = None
    return nominal


def _acrobot_initial(model, data, rng):
    data.qpos[:] = rng.uniform(-0.1, 0.1, 2)
    data.qvel[:] = 0.0


def _acrobot_tip_height(model, data):
    return float(data.site("tip").xpos[2])


def _acrobot_success(model, data):
    return _acrobot_tip_height(model, data) > 3.9


def _acrobot_metric(model, data):
    return float(np.abs(data.site("tip").xpos[[0, 2]] - [0.0, 4.2]).sum())


ACROBOT = IDTOTask(
    name="acrobot", model="acrobot",
    description="swing the acrobot up and balance it with IDTO (tip above 3.9 m for 1 s)",
    # h = 0.02 s, not the authors' 0.05 s: at 0.05 s the swing-up plans exploit the coarse steps
    # (the elbow crosses ~3 rad in two knots) and their cubic splines need shoulder torques of rms
    # 56 N·m (peak 340) under the plant's dynamics — untrackable; at 0.02 s rms 8, at 0.01 s rms
    # 2.8.  A 3 s horizon (the authors': 2 s) with 2 iterations per update: 8/8 seeds instead of
    # 1/8 with 2 s and one iteration (module docstring).
    horizon=150, time_step=0.02,
    # terminal-only position cost (the swing is free), penalty method on the shoulder; R = 1 on
    # the elbow keeps the planned torque near the plant's ±5 N·m limit (the soft actuator limits,
    # actuator_limit_weight, stay off: they did not raise the success rate, module docstring)
    weights=dict(Qq=0.0, Qv=[0.1, 0.1], Qf_q=[100.0, 100.0], Qf_v=[10.0, 10.0], R=[1.0, 1.0],
                 unactuated_penalty=100.0),
    contact=None, nominal=_acrobot_nominal, initial_state=_acrobot_initial, success=_acrobot_success,
    metric=_acrobot_metric, success_hold=1.0, default_seconds=10.0, kp=20.0, kd=3.0, lag=0.01,
    # rate target: the paper has no acrobot example; its closed loop replans every 10 ms
    update_period=0.01, rate_target_hz=100.0, initial_iterations=300, iterations_per_update=2,
)

TASKS = (SPINNER, HOPPER, ACROBOT)

for _task in TASKS:
    register_task(_task.name, "idto", idto_runner(_task), model=_task.model, description=_task.description,
                  default_seconds=_task.default_seconds)
