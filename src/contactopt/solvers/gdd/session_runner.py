"""Running and reporting scripted GDD reaching sessions: :func:`run_session`,
:class:`SessionResult` (time series and report), :func:`gdd_statistics` and :func:`plot_session`
(see :mod:`contactopt.solvers.gdd.sessions`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import mujoco
import numpy as np

from ...errors import ContactoptError, ParameterError
from ...model import model_name
from ...progress import progress_bar
from .reach_session import ReachSession
from .reach_spec import ReachSpec
from .solver import GDDStatus, gdd_step

__all__ = ["SessionResult", "gdd_statistics", "plot_session", "run_session"]


# --------------------------------------------------------------------------- results


@dataclass
class SessionResult:
    """Time series of a session (``N`` steps; per-step arrays hold the state *before* the step).

    Attributes:
      spec: the :class:`ReachSpec`.  model: model name.  timestep: h in s.
      time ``(N,)`` s; qpos ``(N, nq)``; qvel ``(N, nv)``; qacc ``(N, nv)`` the goal-directed
      acceleration a (m/s², rad/s²); qacc_forward ``(N, nv)``; ctrl ``(N, nu)`` applied controls;
      qfrc_actuator ``(N, nv)`` τ, the generalized actuator force (N, N·m);
      active ``(N,)`` index of the active drag (−1: none); goal ``(N, 3)`` dragged goal (NaN
      without one); qref ``(N, nq)`` posture reference; frame_pos ``(N, 3)`` position of the
      active frame; goal_distance ``(N,)`` m to the dragged goal; target_distance ``(N,)`` m
      to the drag's final position; heights ``(N, n_fall + n_drop)`` m of the monitored bodies;
      support ``(N, n_support)`` bool contacts of the support bodies.
      Solver statistics ``(N,)``: status, iterations, dual_updates, factorizations, nefc,
      ncon, physics_violation (m/s²), residual_gradient (N), solve_time (s), step_time (s).
      falls: ``[(time, body)]``; drops: ``[(time, body)]``.
      drag_origin ``(n_drags, 3)``: frame position when each drag started (NaN if never).
      error: message when the session stopped early on an error (the step was not taken).
      wall_time: s.  video_frames: frames written.
    """

    spec: ReachSpec
    model: str
    timestep: float
    arrays: dict
    falls: list = field(default_factory=list)
    drops: list = field(default_factory=list)
    drag_origin: np.ndarray | None = None
    error: str | None = None
    wall_time: float = 0.0
    video_frames: int = 0

    def __getattr__(self, name):
        arrays = self.__dict__.get("arrays")
        if arrays is not None and name in arrays:
            return arrays[name]
        raise AttributeError(name)

    @property
    def steps(self) -> int:
        """Number of steps taken."""
        return int(self.arrays["time"].shape[0])

    def goal_results(self) -> list[dict]:
        """Per drag: frame, start/end s, initial and final distance to the final target (m),
        the smallest distance, whether and when it came within ``reach_tolerance``."""
        out = []
        t = self.arrays["time"]
        dist = self.arrays["target_distance"]
        act = self.arrays["active"]
        tol = self.spec.reach_tolerance
        for k, dr in enumerate(self.spec.drags):
            sel = np.flatnonzero(act == k)
            row = {"frame": dr.frame, "offset": list(dr.offset), "start": dr.start, "end": dr.end,
                   "completed": bool(sel.size and t[sel[-1]] + self.timestep >= dr.end - 1e-9)}
            if sel.size:
                dd = dist[sel]
                hit = np.flatnonzero(dd <= tol)
                row.update(initial_distance=float(dd[0]), final_distance=float(dd[-1]),
                           min_distance=float(dd.min()), reached=bool(hit.size),
                           time_reached=float(t[sel[hit[0]]]) if hit.size else None)
            else:
                row.update(initial_distance=None, final_distance=None, min_distance=None,
                           reached=False, time_reached=None)
            out.append(row)
        return out

    def report(self, *, task: str | None = None, planner: str = "gdd", series_rate: float = 20.0) -> dict:
        """JSON-ready report (the task runner contract plus goal distances, falls and GDD stats).

        Keys: task, planner, model, success, time_to_success (s or None), seconds, steps,
        goals (per drag, see :meth:`goal_results`), goals_reached, goal_distance_{initial,final}_mean
        (m), falls, drops (lists of {time, body}), support_contact_fraction, gdd (iterations
        median/p95, dual updates, constraints, physics violation median/p95, residual gradient
        median/p95, converged fraction, µs per solve and per step), error, and a time series
        ``series`` (time, goal_distance, target_distance) sampled at ``series_rate`` Hz.
        """
        a = self.arrays
        goals = self.goal_results()
        completed = [g for g in goals if g["completed"]]
        ok = (self.error is None and not self.falls and not self.drops and bool(completed)
              and all(g["reached"] for g in completed))
        t_success = max(g["time_reached"] for g in completed) if ok else None
        n = self.steps
        stride = max(1, int(round(1.0 / (series_rate * self.timestep))))
        idx = np.arange(0, n, stride)

        def clean(x):
            return [None if not np.isfinite(v) else round(float(v), 6) for v in x]

        sup = a["support"]
        report = {
            "task": task or self.spec.name,
            "planner": planner,
            "model": self.model,
            "success": bool(ok),
            "time_to_success": t_success,
            "seconds": round(n * self.timestep, 9),
            "steps": n,
            "error": self.error,
            "goals_total": len(goals),
            "goals_completed": len(completed),
            "goals_reached": int(sum(g["reached"] for g in goals)),
            "goal_distance_initial_mean": _mean([g["initial_distance"] for g in completed]),
            "goal_distance_final_mean": _mean([g["final_distance"] for g in completed]),
            "goal_distance_min_mean": _mean([g["min_distance"] for g in completed]),
            "reach_tolerance": self.spec.reach_tolerance,
            "falls": [{"time": round(t, 6), "body": b} for t, b in self.falls],
            "drops": [{"time": round(t, 6), "body": b} for t, b in self.drops],
            "fell": bool(self.falls),
            "support_bodies": list(self.spec.support_bodies),
            "support_contact_fraction": (float(np.mean(np.all(sup, axis=1))) if sup.size and n else None),
            "gdd": gdd_statistics(a),
            "wall_time_s": self.wall_time,
            "realtime_factor": (n * self.timestep / self.wall_time) if self.wall_time > 0 else None,
            "goals": goals,
            "series": {"time": clean(a["time"][idx]), "goal_distance": clean(a["goal_distance"][idx]),
                       "target_distance": clean(a["target_distance"][idx]),
                       "active": [int(x) for x in a["active"][idx]]},
        }
        return report


def _mean(values):
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def gdd_statistics(a: dict) -> dict:
    """Median (and 95th percentile) solver statistics of per-step arrays (see :class:`SessionResult`).

    Returns keys ``iterations_median/p95``, ``dual_updates_median/p95``,
    ``constraints_median/p95`` (rows of J), ``physics_violation_median/p95`` (m/s²),
    ``residual_gradient_median/p95`` (N), ``converged_fraction``, ``solve_us_median/mean``
    and ``step_us_median/mean`` (µs of wall time: one solve, one whole :func:`gdd_step`; the
    first step, which loads the compiled kernels, is left out); empty for an empty session.
    """
    if a["time"].size == 0:
        return {}

    def pct(x, q):
        x = np.asarray(x, dtype=float)
        x = x[np.isfinite(x)]
        return float(np.percentile(x, q)) if x.size else None

    out = {}
    for key, name in (("iterations", "iterations"), ("dual_updates", "dual_updates"),
                      ("nefc", "constraints"), ("physics_violation", "physics_violation"),
                      ("residual_gradient", "residual_gradient")):
        out[f"{name}_median"] = pct(a[key], 50)
        out[f"{name}_p95"] = pct(a[key], 95)
    out["converged_fraction"] = float(np.mean(a["status"] == int(GDDStatus.CONVERGED)))
    # the first step loads the compiled kernels (a one-off cost): left out of the times
    first = 1 if a["time"].size > 1 else 0
    for key, name in (("solve_time", "solve_us"), ("step_time", "step_us")):
        x = a[key][first:]
        x = x[np.isfinite(x)]
        out[f"{name}_median"] = 1e6 * float(np.median(x)) if x.size else None
        out[f"{name}_mean"] = 1e6 * float(np.mean(x)) if x.size else None
    return out


# --------------------------------------------------------------------------- running


class _Recorder:
    """Per-step arrays of a session, grown in chunks (doubling from at most ``_FIRST_CHUNK`` steps)
    as the session runs: a long session costs memory for the steps taken, not an up-front
    allocation for its whole length.  Call :meth:`reserve` before writing step k."""

    _FIRST_CHUNK = 4096

    def __init__(self, model, n, n_mon, n_sup):
        nq, nv, nu = model.nq, model.nv, model.nu
        self.n = n
        n = min(n, self._FIRST_CHUNK)
        f = lambda *shape: np.full(shape, np.nan)
        self.a = {
            "time": np.zeros(n), "qpos": f(n, nq), "qvel": f(n, nv), "qacc": f(n, nv),
            "qacc_forward": f(n, nv), "ctrl": f(n, nu), "qfrc_actuator": f(n, nv),
            "active": np.full(n, -1, dtype=np.int32), "goal": f(n, 3), "qref": f(n, nq),
            "frame_pos": f(n, 3), "goal_distance": f(n), "target_distance": f(n),
            "heights": f(n, n_mon), "support": np.zeros((n, n_sup), dtype=bool),
            "status": np.zeros(n, dtype=np.int8), "iterations": np.zeros(n, dtype=np.int32),
            "dual_updates": np.zeros(n, dtype=np.int32), "factorizations": np.zeros(n, dtype=np.int32),
            "nefc": np.zeros(n, dtype=np.int32), "ncon": np.zeros(n, dtype=np.int32),
            "physics_violation": f(n), "residual_gradient": f(n), "solve_time": f(n), "step_time": f(n),
        }

    def reserve(self, steps):
        """Make room for ``steps`` steps (indices ``0 … steps-1``); the dict ``a`` is updated in place."""
        cap = len(self.a["time"])
        if steps <= cap:
            return
        cap = min(max(steps, 2 * cap), self.n)
        for key, old in self.a.items():
            fill = -1 if key == "active" else (np.nan if old.dtype.kind == "f" and key != "time" else 0)
            new = np.full((cap,) + old.shape[1:], fill, dtype=old.dtype)
            new[: len(old)] = old
            self.a[key] = new

    def trimmed(self, k):
        return {key: v[:k].copy() for key, v in self.a.items()}


def run_session(spec: ReachSpec, *, video=None, plot=None, progress: bool | None = None,
                model: mujoco.MjModel | None = None, extra_terms=(), width: int = 640,
                height: int = 480, fps: float = 30.0) -> SessionResult:
    """Run a scripted goal-directed session.

    Every step: activate/move/release the goals (:meth:`ReachSession.update_goals`),
    :func:`~contactopt.solvers.gdd.solver.gdd_step`, then check falls, drops and supports.  An
    error of the step (non-finite cost or state, a failed solve) stops the session
    *before* that step is taken — the simulation never steps with a non-finite control —
    and is reported in ``result.error``.

    Args:
      spec: the :class:`ReachSpec`.
      video: optional ``.mp4`` path: the model's ``video`` camera (else a tracking camera),
        the active goal drawn as a red sphere, ``fps`` frames per simulated second
        (written atomically).
      plot: optional ``.png`` path for :func:`plot_session`.
      progress: progress bar (None: only on a terminal).
      model: an already loaded model for ``spec.model``.
      extra_terms: additional cost terms.
      width, height: video frame size in pixels (even).

    Returns:
      :class:`SessionResult`.

    Raises:
      ParameterError: bad spec (unknown frame, no actuators, ...), bad output paths.
      RenderError: a video was asked for and no OpenGL backend works.
    """
    from ...simulate import frame_stride

    for flag, path, suffix in (("video", video, ".mp4"), ("plot", plot, ".png")):
        if path is not None:
            from pathlib import Path

            p = Path(path)
            if p.suffix.lower() != suffix:
                raise ParameterError(f"{flag} path must end in {suffix}, got {p}")
            if not p.parent.exists():
                raise ParameterError(f"{flag}: directory {p.parent} does not exist")
    session = ReachSession(spec, model=model, extra_terms=extra_terms)
    m, d = session.model, session.data
    h = float(m.opt.timestep)
    n = int(round(spec.seconds / h))
    if n < 1:
        raise ParameterError(f"session of {spec.seconds:g} s is shorter than one step of {h:g} s")
    rec = _Recorder(m, n, len(session.fall_ids) + len(session.drop_ids), len(session.support_ids))
    a = rec.a
    falls, drops = [], []
    fallen_seen, dropped_seen = set(), set()
    origins = np.full((len(spec.drags), 3), np.nan)
    error = None
    stride = frame_stride(h, fps) if video is not None else 0
    frames = 0
    writer = renderer = None
    k = 0
    start = time.perf_counter()
    try:
        if video is not None:
            from ...render import VideoWriter

            writer = VideoWriter(video, fps=1.0 / (stride * h)).__enter__()
            renderer = _GoalRenderer(m, width, height)
        with progress_bar(total=n, desc=spec.name, unit="step", enable=progress) as bar:
            for k in range(n):
                rec.reserve(k + 1)
                if k:  # positions of the new state (mj_step2 leaves those of the previous one)
                    mujoco.mj_kinematics(m, d)
                session.update_goals()
                act = session.active
                if act >= 0 and not np.isfinite(origins[act, 0]):
                    origins[act] = session.origin
                if stride and k % stride == 0:
                    writer.append(renderer.render(d, session.goal if act >= 0 else None))
                    frames += 1
                a["time"][k] = d.time
                a["qpos"][k] = d.qpos
                a["qvel"][k] = d.qvel
                a["active"][k] = act
                a["goal"][k] = session.goal
                a["qref"][k] = session.qref
                if act >= 0:
                    pos = session.frame_position(spec.drags[act].frame)
                    a["frame_pos"][k] = pos
                    a["goal_distance"][k] = np.linalg.norm(pos - session.goal)
                    a["target_distance"][k] = np.linalg.norm(pos - session.target)
                monitored = session.fall_ids + session.drop_ids
                if monitored:
                    a["heights"][k] = [d.xpos[i, 2] for _, i, _ in monitored]
                for b, i, hmin in session.fall_ids:
                    if d.xpos[i, 2] < hmin and b not in fallen_seen:
                        fallen_seen.add(b)
                        falls.append((float(d.time), b))
                for b, i, hmin in session.drop_ids:
                    if d.xpos[i, 2] < hmin and b not in dropped_seen:
                        dropped_seen.add(b)
                        drops.append((float(d.time), b))
                t0 = time.perf_counter()
                try:
                    res = gdd_step(m, d, session.cost, session.solver)
                except ContactoptError as exc:
                    error = f"t = {d.time:.4f} s: {exc}"
                    break
                a["step_time"][k] = time.perf_counter() - t0
                a["qacc"][k] = res.qacc
                a["qacc_forward"][k] = res.qacc_forward
                a["ctrl"][k] = d.ctrl
                a["qfrc_actuator"][k] = d.qfrc_actuator
                a["status"][k] = int(res.status)
                a["iterations"][k] = res.iterations
                a["dual_updates"][k] = res.dual_updates
                a["factorizations"][k] = res.factorizations
                a["nefc"][k] = res.nefc
                a["ncon"][k] = res.ncon
                a["physics_violation"][k] = res.physics_violation
                a["residual_gradient"][k] = res.residual_gradient
                a["solve_time"][k] = res.solve_time
                if session.support_ids:  # contacts of mj_step1: those of the state before the step
                    a["support"][k] = session.support_contacts()
                bar.update(1)
            else:
                k = n
            if stride and error is None and n % stride == 0:
                mujoco.mj_forward(m, d)
                writer.append(renderer.render(d, None))
                frames += 1
    except BaseException as exc:
        if writer is not None:
            writer.__exit__(type(exc), exc, None)
            writer = None
        raise
    finally:
        if renderer is not None:
            renderer.close()
    if writer is not None:
        writer.__exit__(None, None, None)
    result = SessionResult(spec=spec, model=model_name(m), timestep=h, arrays=rec.trimmed(k),
                           falls=falls, drops=drops, drag_origin=origins, error=error,
                           wall_time=time.perf_counter() - start, video_frames=frames)
    if plot is not None:
        plot_session(result, plot)
    return result


# --------------------------------------------------------------------------- video and plots


def _goal_renderer_class():
    from ...render import OffscreenRenderer

    class GoalRenderer(OffscreenRenderer):
        """:class:`~contactopt.render.OffscreenRenderer` that also draws the goal as a red sphere."""

        def render(self, data, goal=None):  # noqa: D401 - same contract as the base class
            if goal is None or not np.all(np.isfinite(goal)):
                return super().render(data)
            self._gl.make_current()
            if self._track_body >= 0:
                self.camera.lookat[:] = data.subtree_com[self._track_body]
            mujoco.mjv_updateScene(self.model, data, self._option, None, self.camera,
                                   mujoco.mjtCatBit.mjCAT_ALL, self._scene)
            scn = self._scene
            if scn.ngeom < scn.maxgeom:
                radius = max(0.01, 0.012 * float(self.model.stat.extent))
                mujoco.mjv_initGeom(scn.geoms[scn.ngeom], int(mujoco.mjtGeom.mjGEOM_SPHERE),
                                    np.array([radius, 0.0, 0.0]), np.asarray(goal, dtype=float),
                                    np.eye(3).reshape(9), np.array([0.9, 0.1, 0.1, 0.8], dtype=np.float32))
                scn.ngeom += 1
            mujoco.mjr_render(self._viewport, scn, self._context)
            mujoco.mjr_readPixels(self._rgb, None, self._viewport, self._context)
            return np.flipud(self._rgb).copy()

    return GoalRenderer


def _GoalRenderer(model, width, height):
    return _goal_renderer_class()(model, width, height, camera="video")


def plot_session(result: SessionResult, path) -> None:
    """PNG of a session: goal distance, monitored heights and support contacts, GDD
    iterations and constraints, physics violation and residual gradient, µs per solve.

    Shaded spans mark the drags (goal held); the dashed line is ``reach_tolerance``.
    """
    from ...plots import new_figure, save_figure

    a = result.arrays
    t = a["time"]
    fig, axes = new_figure(5, row_height=2.1)
    spec = result.spec
    title = f"{spec.name}: goal-directed dynamics, h = {result.timestep * 1e3:g} ms"
    if result.falls:
        title += f" — FELL at {result.falls[0][0]:.2f} s"
    axes[0, 0].set_title(title)
    ax = axes[0, 0]
    ax.plot(t, a["goal_distance"], lw=1.2, label="to dragged goal")
    ax.plot(t, a["target_distance"], lw=1.2, label="to final goal")
    ax.axhline(spec.reach_tolerance, color="gray", lw=0.8, ls="--", label="tolerance")
    ax.set_ylabel("goal distance [m]")
    ax.legend(loc="upper right", fontsize=7)
    ax = axes[1, 0]
    names = [b for b, _ in spec.fall_heights] + [b for b, _ in spec.drop_heights]
    lims = [hh for _, hh in spec.fall_heights] + [hh for _, hh in spec.drop_heights]
    for j, (b, lim) in enumerate(zip(names, lims)):
        line, = ax.plot(t, a["heights"][:, j], lw=1.2, label=f"{b} height")
        ax.axhline(lim, color=line.get_color(), lw=0.8, ls=":")
    if a["support"].shape[1]:
        ax2 = ax.twinx()
        ax2.step(t, a["support"].sum(axis=1), where="post", color="tab:purple", lw=0.8,
                 label="supports on floor")
        ax2.set_ylabel("supports in contact", fontsize=8)
        ax2.set_ylim(-0.1, a["support"].shape[1] + 0.5)
    ax.set_ylabel("height [m]")
    if names:
        ax.legend(loc="lower left", fontsize=7)
    ax = axes[2, 0]
    ax.plot(t, a["iterations"], lw=0.8, label="iterations")
    ax.plot(t, a["dual_updates"], lw=0.8, label="dual updates")
    ax.plot(t, a["nefc"], lw=0.8, label="constraints")
    ax.set_ylabel("count")
    ax.legend(loc="upper right", fontsize=7)
    ax = axes[3, 0]
    ax.semilogy(t, np.maximum(a["physics_violation"], 1e-17), lw=0.8, label="physics violation [m/s²]")
    ax.semilogy(t, np.maximum(a["residual_gradient"], 1e-17), lw=0.8, label="residual gradient [N]")
    ax.set_ylabel("error (floor 1e-17)")
    ax.legend(loc="upper right", fontsize=7)
    ax = axes[4, 0]
    ax.plot(t[1:], 1e6 * a["solve_time"][1:], lw=0.6, label="GDD solve")
    ax.plot(t[1:], 1e6 * a["step_time"][1:], lw=0.6, label="whole step")
    finite = a["step_time"][1:][np.isfinite(a["step_time"][1:])]
    if finite.size:  # the first step (loading the compiled kernels) is not shown
        ax.set_ylim(0.0, 1.5e6 * float(np.percentile(finite, 99.5)))
    ax.set_ylabel("µs per step")
    ax.set_xlabel("time [s]  (shaded: goal held)")
    ax.legend(loc="upper right", fontsize=7)
    for row in axes[:, 0]:
        row.grid(alpha=0.3)
        for dr in spec.drags:
            row.axvspan(dr.start, min(dr.end, spec.seconds), color="tab:orange", alpha=0.08)
    save_figure(fig, path)
