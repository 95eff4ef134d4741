"""How each registered planner is built from a :class:`~contactopt.task.Task`.

Every builder takes ``(task, plant, options, weights)``: the task, the plant model, the
checked options of :mod:`contactopt.mpc.registry` (None = derive from the task and model)
and the ``weight.NAME`` overrides, and returns a planner with ``reset``, ``update`` and
``close``.  Derived defaults:

* ``timestep``: :meth:`Task.timestep` (a whole multiple of the model's step, ≥ 10 ms);
* ``horizon``: :meth:`Task.horizon_seconds` (a pendulum period of the model's size);
* IDTO's soft actuator limits: on for every model with limited controls, with the weight
  ``actuator_limit_weight`` (default 1e3 × the largest cost weight); its soft joint limits:
  on for every model with limited hinge or slide joints (``joint_limit_weight``, the same
  default); its compliant contact parameters :meth:`ContactParameters.from_model
  <contactopt.contact.compliant.ContactParameters.from_model>` of the planner's model and time
  step; the unactuated forces as equality constraints when the model has unactuated dofs
  (``underactuation``); the first trust radius scaled to the problem (``trust_radius``);
* GDD's feature bandwidth ``ω = 2π / horizon``.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np

from ..errors import ParameterError
from .registry import Option, PlannerSpec, register, task_cost

__all__ = ["build_gdd", "build_idto", "build_ilqg", "planner_dynamics"]


def _grid(task, plant, options):
    """``(h, T)``: the planner time step [s] and the horizon in steps."""
    h = options.get("timestep")
    horizon = options.get("horizon")
    for key, value in (("timestep", h), ("horizon", horizon)):
        if value is not None and not value > 0:  # 0 is a value given, not "use the default"
            raise ParameterError(f"{key} must be positive [s], got {value}")
    h = task.timestep(plant) if h is None else h
    horizon = task.horizon_seconds(plant) if horizon is None else horizon
    if h <= 0 or horizon <= 0:
        raise ParameterError(f"timestep and horizon must be positive, got {h} and {horizon}")
    return float(h), max(1, round(horizon / h))


#: every planner's replan period (read by the runner, the live session and the policy server)
_UPDATE_PERIOD = Option("update_period", float, 0.0, "least simulated time [s] between the states MPC "
                        "updates plan from (0: every plant step the planner is free); both modes")

#: every planner's least policy lag (read by the runner: runner.planner_min_lag)
_MIN_LAG = Option("min_lag", float, 0.0, "least simulated time [s] between the state an update plans from "
                  "and the moment its policy takes effect (0: as soon as it is ready); both modes")

_COMMON = (
    Option("horizon", float, None, "planning horizon [s] (default: derived from the model)"),
    Option("timestep", float, None, "planner time step [s] (default: ≥ 10 ms, a multiple of the model's)"),
    Option("iterations", int, 1, "solver iterations per MPC update"),
    Option("initial_iterations", int, 30, "solver iterations of the first plan"),
    _UPDATE_PERIOD,
    _MIN_LAG,
)


# --------------------------------------------------------------------------- iLQG


def build_ilqg(task, plant, options, weights, *, textbook: bool = False):
    """iLQG MPC at the planner time step (:class:`~contactopt.mpc.ILQGPlanner`) on the dynamics
    of :func:`planner_dynamics`."""
    from ..solvers.ilqg import ILQGSettings
    from .ilqg_planner import ILQGPlanner

    if plant.nu == 0:
        _no_actuators(task, "iLQG")
    h, T = _grid(task, plant, options)
    model = task.make_planner_model(plant, h)
    cost = task_cost(task, model, h, weights)
    dyn = planner_dynamics(model, options)
    fields = {k: options[k] for k in ("mu_init", "mu_min", "mu_max", "delta0", "line_search_steps")
              if options.get(k) is not None}
    settings = ILQGSettings.textbook(**fields) if textbook else ILQGSettings(**fields)
    lag = options["lag_compensation"]
    try:
        planner = ILQGPlanner(dyn, cost, T, settings=settings, iterations_per_update=options["iterations"],
                              initial_iterations=options["initial_iterations"],
                              lag_compensation=None if lag == "off" else lag,
                              lag_prediction=options["lag_prediction"], lag_substeps=options["lag_substeps"],
                              samples=options["samples"],
                              sample_scale=options["sample_scale"],
                              derivative_refresh=options["derivative_refresh"])
    except Exception:
        dyn.close()
        raise
    return planner


def planner_dynamics(model: mujoco.MjModel, options: dict):
    """The planner's :class:`~contactopt.dynamics.Dynamics` on ``model`` (at the planner's step).

    ``options["dynamics"]``: ``"mujoco"`` (:class:`~contactopt.dynamics.MujocoDynamics`, the
    model's own contacts) or ``"smooth"`` (:class:`~contactopt.contact.SmoothContactDynamics`, the
    iLQG paper's smooth contact model with ``contact_eta`` η and ``contact_beta`` β [m/s]; its
    derivatives analytic in velocity and control, first order in position).
    """
    from ..dynamics import MujocoDynamics

    kind = options.get("dynamics") or "mujoco"
    stride = options.get("derivative_stride") or 1
    if kind == "mujoco":
        return MujocoDynamics(model, derivative_stride=stride)
    from ..contact.smooth import SmoothContactDynamics, SmoothContactModel

    contact = SmoothContactModel(eta=options.get("contact_eta", 0.4), beta=options.get("contact_beta", 0.01))
    return SmoothContactDynamics(model, contact, derivative_stride=stride)


_ILQG_OPTIONS = _COMMON + (
    Option("dynamics", str, "mujoco", "planner dynamics: MuJoCo's contacts, or the smooth contact model "
           "of Tassa et al. (2012)", ("mujoco", "smooth")),
    Option("contact_eta", float, 0.4, "smooth dynamics: η of eq. 17, fraction of the impulse applied "
           "(the paper's planner: 0.4)"),
    Option("contact_beta", float, 0.01, "smooth dynamics: β of smax [m/s]"),
    Option("derivative_stride", int, 1, "differentiate every k-th step, interpolate between"),
    Option("derivative_refresh", float, 1.0, "fraction of the steps an update differentiates; the others "
           "reuse the previous update's Jacobians at the same time (oldest refreshed first)"),
    Option("mu_init", float, None, "initial regularization μ"),
    Option("mu_min", float, None, "smallest regularization μ of the schedule"),
    Option("mu_max", float, None, "μ beyond which a solve gives up"),
    Option("delta0", float, None, "growth factor Δ₀ of the μ schedule (> 1)"),
    Option("line_search_steps", tuple, None, "step sizes α tried in order, comma-separated (1,0.5,0.25)"),
    Option("lag_compensation", str, "off", "plan from the state predicted at the policy lag", ("off", "auto")),
    Option("lag_prediction", str, "feedback", "policy the lag prediction simulates",
           ("feedback", "feedforward")),
    Option("lag_substeps", int, 1, "prediction steps per planner step"),
    Option("samples", int, 8, "perturbed control sequences tried after each update (0: plain iLQG)"),
    Option("sample_scale", float, 0.5, "their standard deviation, as a fraction of each control's range"),
)
register(PlannerSpec("ilqg", "iLQG MPC with the improvements of Tassa et al. (2012)", _ILQG_OPTIONS,
                     build_ilqg))
register(PlannerSpec("ilqg-textbook", "textbook iLQG (control regularization, plain value update)",
                     _ILQG_OPTIONS, lambda *a: build_ilqg(*a, textbook=True)))


# --------------------------------------------------------------------------- IDTO


def _no_actuators(task, planner: str):
    """Refuse a model without actuators, naming the fix."""
    from ..errors import ModelError

    raise ModelError(f"task {task.name}: the model has no actuators, so {planner} has nothing to plan; add an "
                     f"<actuator> to the MJCF (e.g. <motor joint=\"...\" gear=\"1\" ctrlrange=\"-1 1\"/>)")


def _may_collide(model: mujoco.MjModel) -> bool:
    """Whether any two geoms of different bodies may collide (contype/conaffinity or a pair)."""
    if model.npair:
        return True
    ct, ca, body = model.geom_contype, model.geom_conaffinity, model.geom_bodyid
    mask = ((ct[:, None] & ca[None, :]) | (ct[None, :] & ca[:, None])) != 0
    return bool(np.any(mask & (body[:, None] != body[None, :])))


def build_idto(task, plant, options, weights):
    """IDTO MPC (:class:`~contactopt.mpc.IDTOPlanner`) on the task's cost at IDTO's knots.

    The cost takes IDTO's diagonal tracking form when it is exactly quadratic in ``q``, ``v``
    and simple motor controls (``fast_path``), else the general knot rows of
    :mod:`contactopt.solvers.idto.knot_cost`.  Defaults derived from the planner's model
    ``model`` (the plant at the planner time step ``h``), with ``w_max`` the largest weight of
    the task's running cost (at least 1):

    * soft actuator limits ``actuator_limit_weight = 1e3 w_max`` when some actuator limits its
      control or force (:func:`contactopt.model.actuator_force_ranges`: ``forcerange``, and
      ``gain · ctrlrange`` of actuators whose force is ``gain · ctrl``; the ctrl range of an
      actuator with a bias, e.g. a position servo, limits a force that depends on the state and
      gets no row);
    * soft joint limits ``joint_limit_weight = 1e3 w_max`` when some hinge or slide joint is
      limited (``jnt_range``);
    * contact: ``CompliantContactModel(model, ContactParameters.from_model(model, h))`` when two
      geoms of different bodies may collide, any of its parameters replaced by the options
      ``contact_stiffness`` [N/m], ``contact_smoothing`` [m], ``contact_dissipation_velocity``,
      ``contact_stiction_velocity`` [m/s] and ``contact_friction`` given, and only the contacts of
      the ``contact_bodies`` when given;
    * ``underactuation="auto"``: ``Zᵀτ_t = 0`` as equality constraints when the model has
      unactuated dofs (:class:`~contactopt.solvers.idto.IDTOSettings`), the penalty
      ``unactuated_penalty`` otherwise (then there is nothing to penalize);
    * targets that follow a reference (:meth:`~contactopt.costs.Residual.with_reference`) are
      scheduled at the knot times of every update: per-knot nominals on the fast path, per-knot
      targets in the general rows;
    * ``lag_compensation="auto"`` plans each update from the state predicted at the shortest
      policy lag measured over the last few updates (:mod:`contactopt.mpc.lag`;
      :class:`~contactopt.mpc.IDTOPlanner`; default off);
    * ``first_guess="reference"`` starts the first plan from those per-knot targets (default: the
      configuration held);
    * ``trust_radius`` None: the first solve's radius is its first Gauss–Newton step
      (``IDTOSettings(initial_radius=None)``), and so is every restart's;
    * a horizon derived from the model (neither the task nor ``horizon`` sets one) has at most
      ``max_knots`` (150) knots: one warm-started iteration per update has to carry the whole
      plan, and its work grows with ``T``; the derived horizon (a pendulum period of the model's
      half extent, which a large floor plane inflates up to its 2.5 s cap) would otherwise give
      250 knots at 10 ms.
    """
    from ..contact.compliant import CompliantContactModel, ContactParameters
    from ..model import actuation_map
    from ..solvers.idto import IDTOProblem, IDTOSettings
    from ..solvers.idto.knot_cost import knot_nominal, quadratic_tracking
    from .idto_planner import IDTOPlanner

    if plant.nu == 0:
        _no_actuators(task, "IDTO")
    h, T = _grid(task, plant, options)
    if options["max_knots"] < 1:
        raise ParameterError(f"max_knots must be at least 1, got {options['max_knots']}")
    if options.get("horizon") is None and task.horizon is None:
        T = min(T, options["max_knots"])
    model = task.make_planner_model(plant, h)
    cost = task_cost(task, model, h, weights)
    G_pinv = np.linalg.pinv(actuation_map(model).control_gain)
    fast = quadratic_tracking(cost, G_pinv) if options["fast_path"] else None
    wmax = max([t.weight for t in cost.running.terms] + [1.0])
    limited = bool(np.any(model.actuator_ctrllimited) or np.any(model.actuator_forcelimited))
    w_lim = options["actuator_limit_weight"]
    if w_lim is None:
        w_lim = 1e3 * wmax if limited else 0.0
    scalar = np.isin(model.jnt_type, (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)))
    w_jnt = options["joint_limit_weight"]
    if w_jnt is None:
        w_jnt = 1e3 * wmax if np.any(scalar & (model.jnt_limited != 0)) else 0.0
    contact = None
    if options["contact"] and _may_collide(model):
        params = ContactParameters.from_model(model, h)
        given = {field: options[f"contact_{field}"] for field in _CONTACT_FIELDS
                 if options.get(f"contact_{field}") is not None}
        if given:
            import dataclasses

            params = dataclasses.replace(params, **given)  # validated by ContactParameters
        bodies = [b.strip() for b in (options.get("contact_bodies") or "").split(",") if b.strip()]
        contact = CompliantContactModel(model, params, bodies=bodies or None)
    q0 = plant.qpos0.copy()
    kwargs = {"contact": contact, "actuator_limit_weight": w_lim, "joint_limit_weight": w_jnt,
              "workers": options["workers"]}
    # IDTO's own R on the forces of unactuated dofs (the paper's "R unactuated"): shapes the
    # constrained method's path, where the forces are driven to zero rather than penalized
    if options["unactuated_weight"] < 0:
        raise ParameterError(f"unactuated_weight must be >= 0, got {options['unactuated_weight']}")
    Z = actuation_map(model).unactuated_basis
    R_unact = options["unactuated_weight"] * (np.abs(Z).max(axis=1) > 1e-9 if Z.shape[1] else np.zeros(model.nv))
    if fast is not None:
        problem = IDTOProblem(model, T, h, q0, Qq=fast["Qq"], Qv=fast["Qv"], R=fast["R"] + R_unact,
                              Qf_q=fast["Qf_q"], Qf_v=fast["Qf_v"], q_nom=fast["q_nom"], v_nom=fast["v_nom"],
                              wrap_dofs=fast["wrap_dofs"],
                              unactuated_penalty=options["unactuated_penalty"], **kwargs)
    else:
        problem = IDTOProblem(model, T, h, q0, Qq=0.0, Qv=0.0, R=R_unact, cost=cost,
                              unactuated_penalty=options["unactuated_penalty"], **kwargs)
    underactuation = options["underactuation"]
    if underactuation == "auto":
        underactuation = "constrained" if problem.Z.shape[1] else "penalty"
    solver_options = IDTOSettings(convergence=None, initial_radius=options["trust_radius"],
                                  underactuation=underactuation,
                                  constrained_step=options["constrained_step"],
                                  multipliers=options["multipliers"])
    nominal = first_guess = None
    if fast is not None and fast["moving"]:
        # moving targets on the fast path: the planner schedules ``cost`` (its sample cost) at
        # every update, then the per-knot nominal is read from the scheduled targets
        def nominal(t, x):
            return knot_nominal(fast, T + 1)
    if options["first_guess"] == "reference":
        if nominal is None or not any(kind == "q" for kind, _, _ in fast["moving"]):
            raise ParameterError(f"first_guess=reference: task {task.name}'s cost has no quadratic Qpos target that "
                                 "follows a reference (Residual.with_reference) to start from")

        def first_guess(t, x):
            return knot_nominal(fast, T + 1)[0]
    return IDTOPlanner(problem, plant_model=plant, options=solver_options, nominal=nominal,
                       initial_guess=first_guess, restart_radius=options["restart_radius"],
                       initial_iterations=options["initial_iterations"],
                       iterations_per_update=options["iterations"], kp=options["kp"], kd=options["kd"],
                       samples=options["samples"], sample_cost=cost, sample_scale=options["sample_scale"],
                       sample_iterations=options["sample_iterations"],
                       lag_compensation=options["lag_compensation"],
                       divergence_factor=(math.inf if options["divergence_factor"] is None
                                          else options["divergence_factor"]))


#: the compliant contact parameters the ``idto`` planner takes as ``contact_<field>`` options
_CONTACT_FIELDS = ("stiffness", "smoothing", "dissipation_velocity", "stiction_velocity", "friction")

register(PlannerSpec("idto", "inverse-dynamics trajectory optimization (Kurtz et al. 2023), one "
                     "trust-region iteration per update", _COMMON + (
                         Option("max_knots", int, 150, "most knots of a horizon derived from the model "
                                "(an explicit horizon is kept)"),
                         Option("trust_radius", float, None, "initial trust radius Δ₀ (scaled units; "
                                "default: the first Gauss-Newton step's norm)"),
                         Option("restart_radius", float, None, "trust radius an update restarts from after a "
                                "collapsed or failed solve (default: trust_radius)"),
                         Option("first_guess", str, "hold", "the first plan starts from the configuration "
                                "held, or from the targets of a Qpos term that follows a reference",
                                ("hold", "reference")),
                         Option("kp", float, 0.0, "policy stiffness along each actuator [N·m/rad or N/m]"),
                         Option("kd", float, 0.0, "policy damping along each actuator [N·m·s/rad or N·s/m]"),
                         Option("underactuation", str, "auto", "forces on unactuated dofs: equality "
                                "constraints or a penalty (auto: constrained when the model has "
                                "unactuated dofs)", ("auto", "constrained", "penalty")),
                         Option("constrained_step", str, "l1", "constrained mode's step: the KKT step "
                                "scaled to the trust radius on an l1 merit, or the dogleg on L + λᵀh",
                                ("l1", "dogleg")),
                         Option("multipliers", str, "banded", "constrained mode's Lagrange "
                                "multipliers: the banded KKT system (time linear in the horizon) "
                                "or the dense Schur complement (the paper's; cubic)",
                                ("banded", "schur")),
                         Option("unactuated_penalty", float, 1e3, "weight of forces on unactuated dofs "
                                "(penalty mode)"),
                         Option("unactuated_weight", float, 0.0, "IDTO's R on the forces of unactuated dofs "
                                "(both modes; in constrained mode it shapes the path to Zᵀτ = 0)"),
                         Option("actuator_limit_weight", float, None,
                                "weight of the soft control limits (default: 1e3 × the largest cost "
                                "weight when the model limits its controls)"),
                         Option("joint_limit_weight", float, None,
                                "weight of the soft joint limits (default: 1e3 × the largest cost "
                                "weight when the model limits a hinge or slide joint)"),
                         Option("divergence_factor", float, None, "an update whose plan costs more than "
                                "this times the previous plan's is refused (the last good plan is kept; a "
                                "second failure in a row restarts cold); default: never"),
                         Option("contact", bool, True, "model contact with IDTO's compliant contact model"),
                         Option("contact_stiffness", float, None, "compliant contact stiffness k [N/m] "
                                "(default: derived from the model's weight and the time step)"),
                         Option("contact_smoothing", float, None, "compliant contact smoothing σ [m] "
                                "(default: a quarter of the thinnest colliding geom)"),
                         Option("contact_dissipation_velocity", float, None, "Hunt-Crossley velocity "
                                "scale v_d [m/s] (default: g h)"),
                         Option("contact_stiction_velocity", float, None, "friction regularization "
                                "velocity v_s [m/s] (default: g h)"),
                         Option("contact_friction", float, None, "friction coefficient μ (default: "
                                "each pair's MuJoCo coefficient)"),
                         Option("contact_bodies", str, "", "comma-separated bodies: model only the contacts "
                                "that involve one of them (default: every pair that may collide)"),
                         Option("fast_path", bool, True, "use IDTO's diagonal weights for quadratic "
                                "tracking costs"),
                         Option("workers", int, 1, "threads for the Jacobian"),
                         Option("samples", int, 16, "perturbed control sequences rolled out after each "
                                "update; a cheaper one restarts the plan (0: plain IDTO)"),
                         Option("sample_scale", float, 0.5, "their standard deviation, as a fraction of "
                                "each control's range"),
                         Option("sample_iterations", int, 5, "iterations of the solve that restarts from "
                                "a cheaper rollout"),
                         Option("lag_compensation", str, "off", "plan from the state predicted at the policy "
                                "lag (MuJoCo stepped under the policy in force)", ("off", "auto")),
                     ), build_idto))


# --------------------------------------------------------------------------- GDD


def build_gdd(task, plant, options, weights):
    """Goal-directed dynamics at the measured state (:class:`~contactopt.mpc.gdd_planner.GDDPlanner`);
    the task's terms become acceleration features (:mod:`contactopt.solvers.gdd.features`)."""
    from ..solvers.gdd import Cost, GDDSettings
    from ..solvers.gdd.features import acceleration_terms, quasi_static_path_check
    from .gdd_planner import GDDPlanner
    from .registry import apply_cost_weights

    if plant.nu == 0:
        _no_actuators(task, "goal-directed dynamics")
    model = task.make_planner_model(plant, float(plant.opt.timestep))
    bandwidth = options["bandwidth"]
    if bandwidth is None:
        horizon = options.get("horizon")
        if horizon is not None and not horizon > 0:
            raise ParameterError(f"horizon must be positive [s], got {horizon}")
        bandwidth = 2.0 * math.pi / (task.horizon_seconds(plant) if horizon is None else horizon)
    terms = apply_cost_weights(task.cost_terms(model), weights)
    try:
        features = acceleration_terms(terms, bandwidth=bandwidth)
    except ParameterError as exc:
        raise ParameterError(f"planner 'gdd' cannot run task {task.name}: {exc}") from None
    if options["static_check"]:
        data = mujoco.MjData(plant)
        task.reset(plant, data, 0)
        why = quasi_static_path_check(model, data.qpos.copy(), terms)
        if why is not None:
            raise ParameterError(f"planner 'gdd' cannot run task {task.name}: {why}; a zero-horizon planner "
                                 "cannot build up momentum first (use ilqg or idto, or --set "
                                 "static_check=false to try anyway)")
    from ..costs.stage import moving_residuals

    return GDDPlanner(model, Cost(*features), GDDSettings(max_iterations=options["max_iterations"]),
                      moving_residuals=moving_residuals(terms))


register(PlannerSpec("gdd", "goal-directed dynamics (Todorov 2018): a zero-horizon planner", (
    Option("horizon", float, None, "time scale [s] of the features' PD law (ω = 2π / horizon)"),
    Option("bandwidth", float, None, "ω [1/s] of the features' PD law: k_p = ω², k_d = 2ω"),
    Option("max_iterations", int, 50, "Gauss-Newton iterations per solve"),
    Option("static_check", bool, True, "refuse a configuration target that cannot be held on the way to it "
           "within the actuator limits (seed 0's initial state)"),
    _UPDATE_PERIOD,
    _MIN_LAG,
), build_gdd, accelerations=True))
