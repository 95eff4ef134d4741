"""A live closed loop: a plant stepping in real time while a planner re-plans beside it.

:class:`LiveRun` is what the browser GUI (``contactopt gui``) drives, without any GUI code:

* a **plant thread** steps a MuJoCo model so that one simulated second takes ``slowdown``
  wall seconds, applying the newest policy of the :class:`~contactopt.mpc.session.PlannerSession`
  at every plant step;
* a **planner thread** calls :meth:`PlannerSession.update` with the newest plant state
  whenever it has changed since the last plan (asynchronous, as in :func:`run_mpc`'s
  ``"async"`` mode; the policy lag is measured);
* a **control interface** callable from any thread: :meth:`~LiveRun.pause`,
  :meth:`~LiveRun.resume`, :meth:`~LiveRun.step`, :meth:`~LiveRun.reset`, :meth:`~LiveRun.push`,
  :meth:`~LiveRun.set` (planner options, cost weights, the planner model's ``model.*`` keys,
  the plant's own ``plant.*`` dynamics keys and ``slowdown``), :meth:`~LiveRun.set_planner`,
  :meth:`~LiveRun.telemetry`, :meth:`~LiveRun.snapshot`, :meth:`~LiveRun.export_settings`;
  :meth:`~LiveRun.drag_push` (a push from a drag in the scene) and :meth:`~LiveRun.goals` /
  :meth:`~LiveRun.set_goal` (move the target of a point residual of the cost).

The plant has its own dynamics parameters (:data:`PLANT_KEYS`), separate from the planner
model's ``model.*`` keys: set them apart to study model error, as in the iLQG MPC paper's GUI.
Every accepted change is appended to :attr:`LiveRun.changes` with its wall and simulated time.

Example::

    run = LiveRun(load_task("acrobot").task(), "ilqg", seed=0)
    run.start()
    run.set({"weight.qvel": 0.1, "plant.mass_scale": 1.2})
    run.push("pole", (0.0, 2.0, 0.0))          # impulse [N s] at the body's centre of mass
    print(run.telemetry()["cost"][-1])
    run.close()
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from pathlib import Path

import mujoco
import numpy as np

from ..errors import ContactoptError, ParameterError
from .live_goals import _GoalsMixin
from .live_helpers import (
    DRAG_GAIN,
    DRAG_MAX_SPEED,
    DRAG_TIME_SCALE,
    GOAL_LIMIT,
    PLANT_KEYS,
    SAFE_RANGES,
    Change,
    _clamp,
    _Ring,
    drag_impulse,
    format_toml,
)
from .runner import next_update_start, pop_newest_due
from .session import DYNAMICS_KEYS, PlannerSession, apply_dynamics

__all__ = ["DRAG_GAIN", "DRAG_MAX_SPEED", "DRAG_TIME_SCALE", "GOAL_LIMIT", "PLANT_KEYS", "SAFE_RANGES", "Change",
           "LiveRun", "drag_impulse", "format_toml"]

class LiveRun(_GoalsMixin):
    """A task's plant and planner running live, controlled from any thread.

    Args:
      task: a :class:`~contactopt.task.Task`.
      planner: a registered planner name (default: the session's).
      settings: initial ``--set`` keys for the planner (planner options, ``weight.*``,
        ``model.*``); ``plant.*`` and ``slowdown`` keys are accepted too.
      seed: seed of the initial state (and of sampling planners).
      slowdown: wall seconds per simulated second (> 0; 1 = real time).
      history: samples kept in each telemetry ring buffer.
      sample_period: simulated seconds between plant telemetry samples (cost, success).

    Raises:
      ParameterError: an unknown planner, key or bad value (nothing runs then).
    """

    def __init__(self, task, planner: str | None = None, *, settings: dict | None = None, seed: int = 0,
                 slowdown: float = 1.0, history: int = 2000, sample_period: float = 0.02):
        settings = dict(settings or {})
        plant_changes = {k: settings.pop(k) for k in list(settings) if k.startswith("plant.") or k == "slowdown"}
        goal_changes = {k: settings.pop(k) for k in list(settings) if k.startswith("target.")}
        #: the task as given; :attr:`task` is the same task whose point-residual targets follow
        #: :meth:`set_goal` (the planner session is built on it)
        self.base_task = task
        self._goal_targets: dict[str, np.ndarray] = {}  # replaced whole, never mutated (read by the planner)
        task = dataclasses.replace(task, cost=self._goal_cost(task.cost),
                                   terminal_cost=None if task.terminal_cost is None
                                   else self._goal_cost(task.terminal_cost))
        self.task = task
        self.session = PlannerSession(task, planner, settings=settings, seed=seed)
        self.nominal = task.load_plant()
        self.seed = int(seed)
        self._lock = threading.RLock()  # guards model/data/plant params and the shared state
        self._wake = threading.Condition(self._lock)
        self._plant_params = {k: d for k, (d, _) in PLANT_KEYS.items()}
        self._slowdown = 1.0
        self.changes: list[Change] = []
        self._changes_max = 1000
        self.model = self.nominal
        self.data = mujoco.MjData(self.model)
        self._apply_plant_and_slowdown({**plant_changes, "slowdown": plant_changes.get("slowdown", slowdown)},
                                       log=False)
        self._cost_model = task.load_plant()
        self._build_term_costs()
        self._goal_info = self._find_goals()
        if goal_changes:
            self._apply_goals(self._check_goals(goal_changes)[0], log=False)
        self.sample_period = float(sample_period)
        self.plant_log = _Ring(history)   # t, cost, cost.<term>, success, rtf
        self.update_log = _Ring(history)  # t, update_ms, lag_ms, planned_cost, ok
        self._paused = False
        self._pending_steps = 0
        self._stop = False
        self._error: BaseException | None = None
        self._version = 0          # plant state version (changes with every step/reset/push)
        self._urgent = False       # a push or a change since the last plan: replan off the period's grid
        self._generation = 0      # bumped by reset: the plant waits for a policy of this generation
        self._policy = None
        self._policy_generation = -1
        self._new = None          # (policy, generation, t_state) handed from planner to plant
        self._waiting = []        # (policy, generation, t_state, t_due) waiting for the planner's min_lag
        self._last_lag = None     # measured lag [s] for the planner's observe_lag
        self._u = np.zeros(self.model.nu)
        self._success_since = None
        self._succeeded_at = None
        self._next_sample = 0.0
        self._rtf = math.nan
        #: simulated time [s] at which the plant pauses itself (None: never), e.g. for a screenshot
        self.pause_at: float | None = None
        self.rebuild_error: str | None = None  # the last refused planner rebuild, for the GUI
        self._threads: list[threading.Thread] = []
        self._reset_state(self.seed)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> LiveRun:
        """Start the plant and planner threads (the plant waits for the first plan)."""
        if self._threads:
            return self
        for target, name in ((self._planner_loop, "contactopt-live-planner"),
                             (self._plant_loop, "contactopt-live-plant")):
            th = threading.Thread(target=target, name=name, daemon=True)
            th.start()
            self._threads.append(th)
        return self

    def close(self) -> None:
        """Stop both threads and free the planner."""
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        for th in self._threads:
            th.join(timeout=30)
        self._threads = []
        self.session.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    @property
    def error(self) -> BaseException | None:
        """The exception that stopped a thread (a diverged plant, a failing planner), or None."""
        return self._error

    # ------------------------------------------------------------------ control interface

    def _log(self, what: str) -> None:
        self.changes.append(Change(time.time(), float(self.data.time), what))
        del self.changes[:-self._changes_max]

    @property
    def paused(self) -> bool:
        """Whether the plant is paused."""
        return self._paused

    def pause(self) -> None:
        """Stop the plant's clock (the planner stops once it has planned from the last state)."""
        with self._wake:
            if not self._paused:
                self._paused = True
                self._sample()  # the plots end at the paused state
                self._log("pause")

    def resume(self) -> None:
        """Restart the plant's clock."""
        with self._wake:
            if self._paused:
                self._paused = False
                self._log("resume")
            self._wake.notify_all()

    def step(self, n: int = 1) -> None:
        """Pause, then advance the plant by ``n`` plant steps (≥ 1) with the newest policy."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ParameterError(f"step: n must be a positive integer, got {n!r}")
        with self._wake:
            self._paused = True
            self._pending_steps += int(n)
            self._log(f"step {int(n)}")
            self._wake.notify_all()

    def reset(self, seed: int | None = None) -> int:
        """Put the plant in the task's initial state for ``seed`` (None: the current seed) at time 0,
        clear the telemetry and replan from it; the plant waits for that plan.  Returns the seed."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ParameterError(f"reset: seed must be an integer >= 0, got {seed!r}")
        with self._wake:
            self.seed = self.seed if seed is None else int(seed)
            self._reset_state(self.seed)
            self._log(f"reset seed={self.seed}")
            self._wake.notify_all()
            return self.seed

    def _reset_state(self, seed: int) -> None:
        self.task.reset(self.model, self.data, seed)
        self.data.time = 0.0
        mujoco.mj_forward(self.model, self.data)
        self._generation += 1
        self._version += 1
        self._policy = None
        self._u[:] = 0.0
        self._success_since = self._succeeded_at = None
        self._next_sample = 0.0
        self.plant_log.clear()
        self.update_log.clear()
        self._sample()

    def body_names(self) -> list[str]:
        """Names of the plant's bodies other than the world (push targets)."""
        m = self.model
        return [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, i) or f"body{i}" for i in range(1, m.nbody)]

    def push(self, body: str, impulse, angular_impulse=(0.0, 0.0, 0.0)) -> np.ndarray:
        """Apply an instantaneous push to ``body``: a linear ``impulse`` (3,) [N·s] in world axes at
        its centre of mass and an ``angular_impulse`` (3,) [N·m·s]; the velocity jumps by
        ``M⁻¹ Jᵀ [impulse; angular_impulse]``.  Returns the velocity change ``(nv,)``."""
        p = np.asarray(impulse, dtype=float).reshape(-1)
        a = np.asarray(angular_impulse, dtype=float).reshape(-1)
        if p.shape != (3,) or a.shape != (3,) or not (np.isfinite(p).all() and np.isfinite(a).all()):
            raise ParameterError(f"push: impulse and angular impulse must be 3 finite numbers, got {impulse!r}, "
                                 f"{angular_impulse!r}")
        with self._wake:
            m, d = self.model, self.data
            bid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, str(body))
            if bid <= 0:
                raise ParameterError(f"push: the plant has no body {body!r} (bodies: {', '.join(self.body_names())})")
            jacp = np.zeros((3, m.nv))
            jacr = np.zeros((3, m.nv))
            mujoco.mj_jacBodyCom(m, d, jacp, jacr, bid)
            f = (jacp.T @ p + jacr.T @ a).reshape(1, m.nv)
            dv = np.zeros((1, m.nv))
            mujoco.mj_solveM(m, d, dv, f)
            d.qvel[:] += dv[0]
            mujoco.mj_forward(m, d)
            self._version += 1
            self._urgent = True  # replans at once, off the update-period grid
            self._log(f"push {body} impulse={p.round(4).tolist()} angular={a.round(4).tolist()}")
            self._wake.notify_all()
            return dv[0].copy()

    def drag_push(self, body: str, displacement, *, gain: float = DRAG_GAIN,
                  time_scale: float = DRAG_TIME_SCALE, max_speed: float = DRAG_MAX_SPEED) -> dict:
        """Push ``body`` as a drag of ``displacement`` (3,) [m, world axes] asks: a linear impulse
        ``gain × m × displacement / time_scale`` [N·s] at its centre of mass, where ``m`` is the
        mass of the body and the bodies it carries (``body_subtreemass``), its length clamped to
        ``m × max_speed`` (see :func:`drag_impulse`).  What the GUI's drag handle calls on release.

        Returns:
          ``{"impulse": (3,), "dv": (nv,), "clamped": bool}``.

        Raises:
          ParameterError: an unknown body or a bad displacement (nothing is pushed).
        """
        with self._wake:
            bid = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, str(body))
            if bid <= 0:
                raise ParameterError(f"drag push: the plant has no body {body!r} "
                                     f"(bodies: {', '.join(self.body_names())})")
            mass = float(self.model.body_subtreemass[bid])
            impulse, clamped = drag_impulse(mass, displacement, gain=gain, time_scale=time_scale,
                                            max_speed=max_speed)
            dv = self.push(body, impulse)
            if clamped:
                self._log(f"drag push {body}: impulse clamped to {mass * max_speed:.4g} N s")
            return {"impulse": impulse, "dv": dv, "clamped": clamped}

    @property
    def slowdown(self) -> float:
        """Wall seconds per simulated second."""
        return self._slowdown

    def plant_values(self) -> dict:
        """The plant's dynamics parameters (:data:`PLANT_KEYS`) and ``slowdown``."""
        with self._lock:
            return {**self._plant_params, "slowdown": self._slowdown}

    def values(self) -> dict:
        """Every key's current value: the session's (planner options, weights, ``model.*``), the
        plant's ``plant.*`` and ``slowdown``."""
        return {**self.session.values(), **self.plant_values()}

    def set(self, changes: dict) -> dict:
        """Change settings (key → value; strings are parsed): planner options and cost weights
        (taking effect at the next planner update), ``model.*`` (the planner's model),
        ``plant.*`` (the plant, at once), ``slowdown`` and goals ``target.*`` (as
        :meth:`set_goal`).  Numbers outside :data:`SAFE_RANGES` are clamped.  All or nothing.

        Returns:
          the values applied (after clamping), key → value; the keys clamped are listed under
          ``"_clamped"``.

        Raises:
          ParameterError: an unknown key or a malformed value (the message names the key).
        """
        if not isinstance(changes, dict):
            raise ParameterError(f"settings must be a dict of key → value, got {type(changes).__name__}")
        applied, clamped = {}, []
        for k, v in changes.items():
            if not isinstance(k, str):
                raise ParameterError(f"setting keys must be strings, got {k!r}")
            v2, c = _clamp(k, v)
            applied[k] = v2
            if c:
                clamped.append(k)
        local = {k: v for k, v in applied.items() if k.startswith("plant.") or k == "slowdown"}
        goals = {k: v for k, v in applied.items() if k.startswith("target.")}
        remote = {k: v for k, v in applied.items() if k not in local and k not in goals}
        with self._wake:
            staged_plant = self._check_plant(local)  # raises before anything changes
            staged_goals, goal_clamped = self._check_goals(goals)
            clamped += goal_clamped
            applied.update({k: tuple(float(c) for c in v) for k, v in staged_goals.items()})
            if remote:
                self.session.set(remote)
            if staged_plant:
                self._apply_plant_and_slowdown(staged_plant, log=False)
            self._apply_goals(staged_goals, log=False)
            for k, v in applied.items():
                self._log(f"set {k} = {v}" + (" (clamped)" if k in clamped else ""))
            if any(k.startswith(("weight.", "terminal.weight.", "target.")) for k in applied):
                self._sample()  # the cost plot shows the new weights at once, also when paused
            self._version += 1
            self._urgent = True  # replan at once (also when paused)
            self._wake.notify_all()
        values = self.values()
        out = {k: values.get(k, v) for k, v in applied.items()}
        out["_clamped"] = clamped
        return out

    def set_planner(self, name: str) -> None:
        """Switch the planner at its next update (keeps the weights and ``model.*``)."""
        with self._wake:
            self.session.set_planner(name)
            self._log(f"planner = {name}")
            self._version += 1
            self._urgent = True
            self._wake.notify_all()

    def _check_plant(self, changes: dict) -> dict:
        out = {}
        for key, value in changes.items():
            if key != "slowdown" and key not in PLANT_KEYS:
                raise ParameterError(f"unknown setting {key!r} (plant keys: {', '.join(PLANT_KEYS)}, slowdown)")
            default = None if key == "slowdown" else PLANT_KEYS[key][0]
            if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "auto")):
                if key == "slowdown" or (default is not None):
                    raise ParameterError(f"{key}: expected a positive number, got {value!r}")
                out[key] = None
                continue
            try:
                if isinstance(value, bool):
                    raise TypeError
                v = float(value)
            except (TypeError, ValueError):
                raise ParameterError(f"{key}: expected a positive number, got {value!r}") from None
            if not (math.isfinite(v) and (v > 0 or (v == 0 and key == "plant.friction_scale"))):
                raise ParameterError(f"{key}: must be positive and finite, got {value!r}")
            out[key] = v
        return out

    def _apply_plant_and_slowdown(self, changes: dict, *, log: bool = True) -> None:
        changes = self._check_plant(changes)
        if "slowdown" in changes:
            self._slowdown = float(changes.pop("slowdown"))
        if not changes:
            return
        params = {**self._plant_params, **changes}
        dyn = {"model." + k[len("plant."):]: v for k, v in params.items() if k != "plant.timestep"}
        dyn = {k: v for k, v in dyn.items() if k in DYNAMICS_KEYS}
        model = apply_dynamics(self.nominal, dyn)
        if params["plant.timestep"] is not None:
            model.opt.timestep = float(params["plant.timestep"])
        old = self.data
        data = mujoco.MjData(model)
        data.time = old.time
        data.qpos[:] = old.qpos
        data.qvel[:] = old.qvel
        if model.na:
            data.act[:] = old.act
        if model.nmocap:
            data.mocap_pos[:] = old.mocap_pos
            data.mocap_quat[:] = old.mocap_quat
        data.ctrl[:] = old.ctrl
        mujoco.mj_forward(model, data)
        self.model, self.data, self._plant_params = model, data, params
        self._version += 1
        self._urgent = True

    # ------------------------------------------------------------------ state and telemetry

    def state(self) -> tuple[float, np.ndarray]:
        """``(t [s], x = [qpos, qvel, act] (nx,))`` of the plant now."""
        with self._lock:
            d = self.data
            return float(d.time), np.concatenate([d.qpos, d.qvel, d.act])

    def snapshot(self, contacts: bool = False) -> dict:
        """The plant now, for drawing: ``time`` [s], ``xpos (nbody, 3)``, ``xquat (nbody, 4)``
        (w, x, y, z), ``xipos (nbody, 3)`` (centres of mass), ``qpos (nq,)``, ``paused``, ``version``; with ``contacts``, ``contact_pos
        (ncon, 3)`` and ``contact_force (ncon, 3)`` [N] in world axes."""
        with self._lock:
            m, d = self.model, self.data
            out = {"time": float(d.time), "xpos": d.xpos.copy(), "xquat": d.xquat.copy(), "xipos": d.xipos.copy(),
                   "mocap_pos": d.mocap_pos.copy(), "qpos": d.qpos.copy(), "qvel": d.qvel.copy(),
                   "paused": self._paused, "version": self._version, "generation": self._generation}
            if contacts:
                n = d.ncon
                pos = np.zeros((n, 3))
                force = np.zeros((n, 3))
                f6 = np.zeros(6)
                for i in range(n):
                    c = d.contact[i]
                    pos[i] = c.pos
                    mujoco.mj_contactForce(m, d, i, f6)
                    force[i] = np.asarray(c.frame).reshape(3, 3).T @ f6[:3]
                out["contact_pos"], out["contact_force"] = pos, force
            return out

    def telemetry(self) -> dict:
        """Ring-buffered time series: ``plant`` (``t``, ``cost``, ``cost.<weight key>``,
        ``success`` 0/1, ``rtf`` real-time factor) and ``updates`` (``t``, ``update_ms``,
        ``lag_ms``, ``planned_cost``, ``ok``), each a dict of ``(n,)`` arrays; and ``status``:
        the latest values (time, paused, seed, planner, slowdown, succeeded_at, updates, error)."""
        with self._lock:
            plant, upd = self.plant_log.arrays(), self.update_log.arrays()
            status = {"time": float(self.data.time), "paused": self._paused, "seed": self.seed,
                      "planner": self.session.planner_name, "slowdown": self._slowdown,
                      "succeeded_at": self._succeeded_at, "rtf": self._rtf,
                      "success": bool(plant["success"][-1]) if len(plant.get("success", ())) else False,
                      "plant_version": self._version,
                      "error": None if self._error is None else f"{type(self._error).__name__}: {self._error}"}
        st = self.session.status()
        status.update(updates=st["updates"], failures=st["failures"], rebuilds=st["rebuilds"],
                      last_message=st["last_message"], update_rate_hz=st["update_rate_hz"])
        return {"plant": plant, "updates": upd, "status": status}

    def export_settings(self, path) -> Path:
        """Write every non-default ``--set`` key of the planner (planner, weights, ``model.*``) to
        ``path`` as top-level TOML, for ``contactopt run TASK --planner P --options FILE``; the
        planner name and the plant's parameters are comments.  Returns the path."""
        path = Path(path)
        if not path.parent.exists():
            raise ParameterError(f"export settings: directory {path.parent} does not exist")
        rows = {r.key: r for r in self.session.settings()}
        values = {k: r.value for k, r in rows.items() if r.value is not None and r.value != r.default}
        head = [f"# contactopt gui settings of task {self.task.name!r}",
                f"# contactopt run {self.task.name} --planner {self.session.planner_name} --options {path.name}",
                "# plant (not read by run): " + ", ".join(f"{k}={v}" for k, v in self.plant_values().items())]
        moved = {k: g["target"] for k, g in self.goals().items() if (g["target"] != g["default"]).any()}
        values.update({k: [float(x) for x in np.round(v, 9)] for k, v in moved.items()})  # target.* keys
        path.write_text("\n".join(head) + "\n" + format_toml(values))
        self._log(f"export settings {path}")
        return path

    # ------------------------------------------------------------------ threads

    def _sample(self) -> None:
        """Record the plant's cost terms and success test now (lock held)."""
        m, d = self.model, self.data
        x = np.concatenate([d.qpos, d.qvel, d.act])
        weights = self.session.values()
        row = {"t": float(d.time)}
        total = 0.0
        for key, cost, uses_u in zip(self._term_keys, self._term_costs, self._term_uses_u):
            cost.schedule([d.time], d.time, x)  # a target that follows a reference: the one of now
            v = weights.get(key, 1.0) * cost.value(x, self._u if uses_u else None)
            row["cost." + key] = v
            total += v
        row["cost"] = total
        ok = False
        if self.task.success is not None:
            ok = bool(self.task.success(m, d))
            if ok:
                if self._success_since is None:
                    self._success_since = float(d.time)
                if self._succeeded_at is None and d.time - self._success_since >= self.task.success_hold - 1e-12:
                    self._succeeded_at = self._success_since
            else:
                self._success_since = None
        row["success"] = float(ok)
        row["rtf"] = self._rtf
        self.plant_log.append(**row)

    def _plant_loop(self) -> None:
        try:
            anchor_wall, anchor_t = time.perf_counter(), float(self.data.time)
            rtf_wall, rtf_t = anchor_wall, anchor_t
            anchor_slowdown = self._slowdown
            while True:
                with self._wake:
                    while not self._stop and (
                            (self._paused and self._pending_steps == 0)
                            or (self._policy is None and self._new is None)
                            or (self._new is None and self._policy_generation != self._generation)):
                        self._wake.wait(0.1)
                        anchor_wall, anchor_t = time.perf_counter(), float(self.data.time)
                        rtf_wall, rtf_t = anchor_wall, anchor_t
                    if self._stop:
                        return
                    if self._new is not None:
                        policy, gen, t_state = self._new
                        self._new = None
                        if gen == self._generation:
                            # each plan of this episode waits for the planner's ``min_lag`` (as in
                            # the runner's modes); an episode's first plan takes effect at once
                            first = self._policy_generation != gen
                            due = -math.inf if first else t_state + self.session.min_lag
                            self._waiting.append((policy, gen, t_state, due))
                    if self._waiting:
                        now = float(self.data.time)
                        self._waiting = [w for w in self._waiting if w[1] == self._generation]
                        due = pop_newest_due(self._waiting, now)
                        if due is not None:
                            policy, gen, t_state, _ = due
                            self._policy, self._policy_generation = policy, gen
                            lag = float(self.data.time) - t_state  # planned-from state → applied
                            self._last_lag = lag
                            self.update_log.append(t=float(self.data.time), lag_ms=1e3 * lag)
                    if self._policy_generation != self._generation:
                        continue
                    m, d = self.model, self.data
                    t = float(d.time)
                    if t < anchor_t - 1e-12:  # reset
                        anchor_wall, anchor_t = time.perf_counter(), t
                        rtf_wall, rtf_t = anchor_wall, t
                    stepping = self._pending_steps > 0
                    if stepping:
                        self._pending_steps -= 1
                    x = np.concatenate([d.qpos, d.qvel, d.act])
                    u = self._policy.control(t, x)
                    if not np.all(np.isfinite(u)):
                        u = self._policy.feedforward(t)
                        if not np.all(np.isfinite(u)):
                            u = self._u
                    self._u = np.asarray(u, dtype=float)
                    d.ctrl[:] = self._u
                    mujoco.mj_step(m, d)
                    if not (np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all()):
                        raise ContactoptError(f"the plant diverged at t = {t:.4f} s (non-finite state)")
                    self._version += 1
                    if self.pause_at is not None and t < self.pause_at <= d.time + 1e-12:
                        self._paused = True
                        self._log(f"pause at t = {self.pause_at:g} s")
                    if d.time >= self._next_sample - 1e-12:
                        self._next_sample = float(d.time) + self.sample_period
                        now = time.perf_counter()
                        if now - rtf_wall >= 0.25:
                            self._rtf = (float(d.time) - rtf_t) / (now - rtf_wall)
                            rtf_wall, rtf_t = now, float(d.time)
                        self._sample()
                    self._wake.notify_all()
                    slowdown = self._slowdown
                    if stepping:
                        continue
                # pace outside the lock
                if slowdown != anchor_slowdown:  # a new slowdown counts from now
                    anchor_wall, anchor_t, anchor_slowdown = time.perf_counter(), float(self.data.time), slowdown
                target = anchor_wall + (float(self.data.time) - anchor_t) * slowdown
                ahead = target - time.perf_counter()
                if ahead > 0:
                    time.sleep(min(ahead, 0.05))
                elif ahead < -0.05:  # cannot keep up: do not try to catch up later
                    anchor_wall, anchor_t = time.perf_counter(), float(self.data.time)
        except BaseException as exc:  # noqa: BLE001 - reported through .error and telemetry
            with self._wake:
                self._error = exc
                self._paused = True
                self._log(f"plant stopped: {type(exc).__name__}: {exc}")

    def _planner_loop(self) -> None:
        session = self.session
        planned_version = -1
        planned_generation = -1
        next_start = -np.inf  # the update-period grid (as in the runner's modes)
        try:
            while True:
                with self._wake:
                    while not self._stop and (self._version == planned_version or (
                            self._generation == planned_generation and not self._urgent
                            and self.data.time < next_start - 1e-9)):
                        self._wake.wait(0.1)
                    if self._stop:
                        return
                    t = float(self.data.time)
                    x = np.concatenate([self.data.qpos, self.data.qvel, self.data.act])
                    version, generation = self._version, self._generation
                    lag, self._last_lag = self._last_lag, None
                    self._urgent = False
                # the planner's own period (a setting: followed when changed); a late planner
                # starts again from the newest state
                period = session.update_period
                if period <= 0 or generation != planned_generation:
                    next_start = -np.inf  # no grid, or a new episode: a new one
                if period > 0:
                    next_start = next_update_start(next_start, period, t)
                if lag is not None and session.planner is not None and generation == planned_generation:
                    observe = getattr(session.planner, "observe_lag", None)
                    if observe is not None:
                        observe(lag)
                start = time.perf_counter()
                try:
                    upd = session.reset(t, x) if generation != planned_generation else session.update(t, x)
                except ContactoptError as exc:
                    if session.planner is None:
                        raise  # no planner to fall back on
                    with self._wake:  # a refused rebuild: the session keeps the planner in use
                        self._log(f"planner refused the change: {exc}")
                        self.rebuild_error = str(exc)
                    planned_version = -1
                    continue
                ms = 1e3 * (upd.compute_time or (time.perf_counter() - start))
                planned_version, planned_generation = version, generation
                with self._wake:
                    if generation == self._generation:  # not an update of an episode a reset ended
                        self.update_log.append(t=t, update_ms=ms, planned_cost=upd.cost,
                                               ok=float(upd.policy is not None))
                        if upd.policy is not None:
                            self._new = (upd.policy, generation, t)
                    self._wake.notify_all()
        except BaseException as exc:  # noqa: BLE001 - reported through .error and telemetry
            with self._wake:
                self._error = exc
                self._paused = True
                self._log(f"planner stopped: {type(exc).__name__}: {exc}")
