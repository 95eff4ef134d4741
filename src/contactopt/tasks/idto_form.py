"""An IDTO scenario as a planner-independent :class:`~contactopt.Task` (:func:`as_task`).

An :class:`~contactopt.tasks.idto_task.IDTOTask` states its cost as IDTO's diagonal tracking of a
nominal that the task re-anchors at every update::

    h Σ_t q̃_tᵀ Q_q q̃_t + ṽ_tᵀ Q_v ṽ_t + τ_tᵀ R τ_t  +  q̃_Tᵀ Q_f,q q̃_T + ṽ_Tᵀ Q_f,v ṽ_T,
    q̃_t = q_t ⊖ q_nom,t,   ṽ_t = v_t − v_nom,t,   (q_nom, v_nom) = nominal(t0, x0)

In the shared cost language that is one :class:`~contactopt.costs.Qpos` (one
:class:`~contactopt.costs.Qvel`) term per distinct weight, with weight ``w = 2 Q`` (a
quadratic term costs ``w/2 ‖r‖²``) and a target that follows the nominal
(:meth:`~contactopt.costs.Residual.with_reference`: the target of time ``t`` is the nominal
row at ``(t − t0)/h``, linearly interpolated), and one :class:`~contactopt.costs.Control` term
per distinct actuator weight ``w_i = 2 R_d / (G⁺_{i,d})²`` for an actuator ``i`` that drives dof
``d`` alone (``u = G⁺τ``).  IDTO's own fast path recognizes exactly these terms, so the generic
``idto`` planner solves the same problem; the task's contact parameters, solver settings, PD
gains, iteration counts, replan period (``update_period``: the rate the task was tuned at) and
least policy lag (``min_lag``) become its ``planner_options["idto"]``.  What the generic planner does not take (a task's own
first guess other than its nominal, a fixed policy lag — give it with ``--lag``) is left out,
and the form's success rate is measured on its own (``contactopt bench tasks --tasks task:NAME``).
"""

from __future__ import annotations

import weakref

import mujoco
import numpy as np

from ..errors import ParameterError

__all__ = ["as_task"]


class _NominalCache:
    """``nominal(t0, x0)`` of an IDTO task on one model, computed once per plan (the reference of
    every stage of a plan asks for the same anchor)."""

    def __init__(self, task, model):
        self.fn = task.nominal(model, task.horizon, task.time_step)
        self.nq, self.nv = model.nq, model.nv
        self.h = float(task.time_step)
        self.T = int(task.horizon)
        self._key = None
        self._rows = None
        # one callable each, shared by the running and terminal terms (IDTO's fast path takes
        # two terms on one coordinate only when they follow the very same reference)
        self.q_reference = lambda t, t0, x0: self.at(0, t, t0, x0)
        self._v_references: dict = {}

    def v_reference(self, dofs):
        """The velocity reference of ``dofs`` (one callable per dof set, as :attr:`q_reference`)."""
        key = tuple(int(d) for d in dofs)
        ref = self._v_references.get(key)
        if ref is None:
            idx = np.array(key, dtype=np.intp)
            ref = self._v_references[key] = lambda t, t0, x0: self.at(1, t, t0, x0)[idx]
        return ref

    def rows(self, t0: float, x0: np.ndarray):
        key = (float(t0), x0.tobytes())
        if key != self._key:
            q, v = self.fn(float(t0), np.asarray(x0, dtype=float))
            # as IDTOProblem.set_nominal takes them: (T+1, n) or (n,) rows; v None = at rest
            v = np.zeros(self.nv) if v is None else v
            self._rows = (np.broadcast_to(np.asarray(q, dtype=float), (self.T + 1, self.nq)),
                          np.broadcast_to(np.asarray(v, dtype=float), (self.T + 1, self.nv)))
            self._key = key
        return self._rows

    def at(self, which: int, t: float, t0: float, x0) -> np.ndarray:
        """Row ``(t − t0)/h`` of the nominal's ``q`` (``which`` 0) or ``v`` (1), interpolated."""
        rows = self.rows(t0, x0)[which]
        s = min(max((t - t0) / self.h, 0.0), float(self.T))
        k = min(int(np.floor(s)), self.T - 1) if self.T > 0 else 0
        a = s - k
        if a <= 1e-12 or self.T == 0:
            return rows[k].copy()
        return (1.0 - a) * rows[k] + a * rows[k + 1]


def _groups(values, size: int) -> list[tuple[float, np.ndarray]]:
    """``(value, indices)`` of each distinct nonzero value of a scalar-or-``(size,)`` weight."""
    w = np.broadcast_to(np.asarray(values, dtype=float), (size,))
    return [(float(v), np.flatnonzero(w == v)) for v in dict.fromkeys(w.tolist()) if v != 0.0]


def _control_groups(model, R) -> list[tuple[float, np.ndarray]]:
    """``(w, actuators)``: shared Control weights equal to IDTO's ``τᵀ diag(R) τ`` for actuators that
    each drive one dof alone; a model whose actuators share dofs gets one term at the mean weight."""
    from ..model import actuation_map

    G_pinv = np.linalg.pinv(actuation_map(model).control_gain)  # (nu, nv)
    Rv = np.broadcast_to(np.asarray(R, dtype=float), (model.nv,))
    tol = 1e-12 * max(np.abs(G_pinv).max(initial=0.0), 1.0)
    weights = np.zeros(model.nu)
    for i in range(model.nu):
        dofs = np.flatnonzero(np.abs(G_pinv[i]) > tol)
        if dofs.size != 1 or np.count_nonzero(np.abs(G_pinv[:, dofs[0]]) > tol) != 1:
            active = Rv[np.abs(G_pinv).max(axis=0) > tol]
            w = 2.0 * float(active.mean()) if active.size else 0.0
            return [(w, np.arange(model.nu))] if w else []
        d = int(dofs[0])
        weights[i] = 2.0 * Rv[d] / G_pinv[i, d] ** 2
    return _groups(weights, model.nu)


def _terms(task, model, cache: _NominalCache, *, terminal: bool):
    from ..costs import Control, CostTerm, Qpos, Quadratic, Qvel

    wq = "Qf_q" if terminal else "Qq"
    weights = task.weights
    q_ref = cache.q_reference
    terms = []
    q_groups = _groups(weights.get(wq, 0.0), model.nv)
    for j, (value, dofs) in enumerate(q_groups):
        name = "qpos" + (f"_{j}" if len(q_groups) > 1 else "")
        terms.append(CostTerm(Qpos(model, dofs=dofs, reference=q_ref, wrap=False, name=name), Quadratic(),
                              2.0 * value))
    # velocity terms on the cells of equal (running, terminal) weight, so that a dof's running and
    # terminal terms follow the same reference callable (one per dof set)
    run_v = np.broadcast_to(np.asarray(weights.get("Qv", 0.0), dtype=float), (model.nv,))
    fin_v = np.broadcast_to(np.asarray(weights.get("Qf_v", 0.0), dtype=float), (model.nv,))
    here = fin_v if terminal else run_v
    cells = [np.flatnonzero((run_v == a) & (fin_v == b)) for a, b in dict.fromkeys(zip(run_v, fin_v))]
    cells = [c for c in cells if here[c[0]] != 0.0]
    for j, dofs in enumerate(cells):
        name = "qvel" + (f"_{j}" if len(cells) > 1 else "")
        terms.append(CostTerm(Qvel(model, dofs=dofs, reference=cache.v_reference(dofs), name=name), Quadratic(),
                              2.0 * float(here[dofs[0]])))
    if not terminal and model.nu:
        c_groups = _control_groups(model, weights.get("R", 0.0))
        for j, (value, acts) in enumerate(c_groups):
            name = "ctrl" + (f"_{j}" if len(c_groups) > 1 else "")
            terms.append(CostTerm(Control(model, actuators=acts, name=name), Quadratic(), value))
    return terms


def _unactuated_R(task) -> float:
    """The task's ``R`` on its model's unactuated dofs (their mean where they differ; 0: none)."""
    from ..model import actuation_map, load_model

    model = load_model(task.model)
    Z = actuation_map(model).unactuated_basis
    if not Z.shape[1]:
        return 0.0
    R = np.broadcast_to(np.asarray(task.weights.get("R", 0.0), dtype=float), (model.nv,))
    return float(R[np.abs(Z).max(axis=1) > 1e-9].mean())


def _idto_options(task) -> dict:
    """The IDTO task's settings as options of the generic ``idto`` planner."""
    from ..solvers.idto import IDTOSettings

    opts = {"samples": 0, "actuator_limit_weight": 0.0, "joint_limit_weight": 0.0,
            "constrained_step": task.solver.get("constrained_step", IDTOSettings().constrained_step),
            "multipliers": task.solver.get("multipliers", IDTOSettings().multipliers),
            "kp": float(np.mean(task.kp)), "kd": float(np.mean(task.kd)),
            "initial_iterations": int(task.initial_iterations), "iterations": int(task.iterations_per_update),
            "update_period": float(task.update_period), "min_lag": task.policy_min_lag(),
            "underactuation": task.solver.get("underactuation", "penalty")}
    if task.weights.get("unactuated_penalty") is not None:
        opts["unactuated_penalty"] = float(task.weights["unactuated_penalty"])
    R_unact = _unactuated_R(task)
    if R_unact:
        opts["unactuated_weight"] = R_unact
    radius = task.solver.get("initial_radius", IDTOSettings().initial_radius)
    if radius is not None:
        opts["trust_radius"] = float(radius)
    if task.restart_radius is not None:
        opts["restart_radius"] = float(task.restart_radius)
    if task.contact is None:
        opts["contact"] = False
    else:
        for field in ("stiffness", "smoothing", "dissipation_velocity", "stiction_velocity", "friction"):
            if task.contact.get(field) is not None:
                opts[f"contact_{field}"] = float(task.contact[field])
        if task.contact.get("bodies"):
            opts["contact_bodies"] = ",".join(task.contact["bodies"])
    if task.initial_guess is not None:
        opts["first_guess"] = "reference"
    return opts


def as_task(task):
    """``task`` (an :class:`~contactopt.tasks.idto_task.IDTOTask`) as a :class:`~contactopt.Task`
    (module docstring): the same plant, initial states, success, failure and metric; its cost in
    the shared language with targets that follow its nominal; its settings as the ``idto``
    planner's options.

    Raises:
      ParameterError: per-actuator PD gains that differ (the generic policy takes one gain each).
    """
    from ..task import Task

    for name in ("kp", "kd"):
        g = np.atleast_1d(np.asarray(getattr(task, name), dtype=float))
        if g.size > 1 and np.ptp(g) > 0:
            raise ParameterError(f"IDTO task {task.name}: per-actuator {name} has no generic-planner option")
    caches: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model → its nominal's cache

    def cache_for(model):
        c = caches.get(model)
        if c is None:
            c = caches[model] = _NominalCache(task, model)
        return c

    # the success test of a task that measures from the initial state (success_factory): one per
    # plant MjData, made when its state is (re)set — a reset on the same data starts a fresh one
    tests: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def initial_state(model, data, rng):
        task.initial_state(model, data, rng)
        mujoco.mj_forward(model, data)
        if task.success_factory is not None:
            tests[data] = task.success_factory(np.concatenate([data.qpos, data.qvel]), task.default_seconds)

    success = task.success
    if task.success_factory is not None:
        def success(model, data):
            test = tests.get(data)
            return test is not None and bool(test(model, data))

    def planner_model(model):
        if task.planner_model is not None:
            task.planner_model(model)
        return model

    any_terminal = any(np.any(np.asarray(task.weights.get(k, 0.0)) != 0) for k in ("Qf_q", "Qf_v"))
    return Task(name=task.name, model=task.model,
                cost=lambda model: _terms(task, model, cache_for(model), terminal=False),
                terminal_cost=lambda model: (_terms(task, model, cache_for(model), terminal=True)
                                             if any_terminal else []),
                initial_state=initial_state, success=success, success_hold=task.success_hold,
                failure=task.failure, duration=task.default_seconds, horizon=task.horizon * task.time_step,
                planner_timestep=task.time_step, planner_options={"idto": _idto_options(task)},
                description=task.description, metric=task.metric,
                planner_model=planner_model if task.planner_model is not None else None)
