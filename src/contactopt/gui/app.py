"""The browser GUI: a viser server drawing and driving a :class:`~contactopt.mpc.live.LiveRun`.

Everything shown is shared by every connected browser (viser's server-level state), so two
browsers see and drive the same run and a browser that reconnects sees the current state.
The setting panels are generated from :meth:`PlannerSession.settings` and
:data:`~contactopt.mpc.live.PLANT_KEYS`, never written per task.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import mujoco
import numpy as np

from ..errors import ContactoptError, ParameterError
from ..mpc.live import DRAG_GAIN, DRAG_MAX_SPEED, DRAG_TIME_SCALE, PLANT_KEYS, LiveRun
from .auth import guarded_serve
from .scene import BodyScene

__all__ = ["GuiApp"]

_GROUPS = (("planner", "Planner"), ("cost", "Cost weights"), ("terminal", "Terminal weights"),
           ("model", "Planner model dynamics"))
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


def _fmt(value) -> str:
    """A setting's value as the text shown in its field (None → empty: derived)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (tuple, list)):
        return ", ".join(_fmt(v) for v in value)
    return str(value)


def _parse_field(kind: str, text: str):
    """The text of a field as what :meth:`LiveRun.set` takes (strings are parsed there)."""
    text = text.strip()
    if text == "":
        return None
    if kind == "tuple":
        return text
    return text


def _finite(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    return np.where(np.isfinite(a), a, np.nan)


class GuiApp:
    """A viser server for ``run``.

    Args:
      run: the :class:`LiveRun` (started by :meth:`start` if it is not running).
      host, port: where to listen (viser takes the next free port if ``port`` is taken;
        :attr:`port` is the one bound).
      token: None, or a string every HTTP request and websocket must carry (``?token=`` or
        its cookie).
      out_dir: folder for exported settings and recorded clips.
      scene_hz: target scene updates per second (> 0).
      plot_hz: plot and status refreshes per second.
    """

    #: default target scene updates per second
    DEFAULT_SCENE_HZ = 40.0

    def __init__(self, run: LiveRun, *, host: str = "127.0.0.1", port: int = 8080, token: str | None = None,
                 out_dir=".", scene_hz: float = DEFAULT_SCENE_HZ, plot_hz: float = 4.0, plot_points: int = 600):
        if not (math.isfinite(scene_hz) and scene_hz > 0):
            raise ParameterError(f"scene_hz must be positive, got {scene_hz!r}")
        self.run = run
        self.host, self.requested_port, self.token = host, int(port), token
        self.out_dir = Path(out_dir)
        self.scene_hz, self.plot_hz, self.plot_points = float(scene_hz), float(plot_hz), int(plot_points)
        self.server = None
        self.port = None
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()
        self._scene_times: list[float] = []
        self._scene_updates = 0
        self._fields: dict[str, tuple] = {}  # key → (handle, kind)
        self._planner_handles: list = []
        self._messages: list[str] = []
        self._recording = None  # dict while a clip is being recorded
        self._last_plot: dict = {}
        self._plot_revision = 0
        self._trace_policy = None
        self._dragging = False      # the push handle is held: the scene loop leaves it alone
        self._drag_start = None
        self._goal_handles: dict = {}  # goal key → transform controls
        self._goal_fields: dict = {}   # goal key → text field "x, y, z"
        self._goal_dragging: set = set()

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        """The address to open (with the token when there is one)."""
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        q = "" if self.token is None else f"?token={self.token}"
        return f"http://{host}:{self.port}/{q}"

    def start(self) -> GuiApp:
        """Start the server, build the page and the scene loop; start the run."""
        import viser

        with guarded_serve(self.token, self.state) as guard:
            self.server = viser.ViserServer(host=self.host, port=self.requested_port,
                                            label=f"contactopt · {self.run.task.name}", verbose=False)
        if not guard["installed"]:
            self.server.stop()
            self.server = None
            self.run.close()
            raise ContactoptError(f"viser {viser.__version__} started its server in a way contactopt does not "
                                  "know: the token check and the state route cannot be installed")
        self.port = self.server.get_port()
        self._build()
        if not self.run._threads:
            self.run.start()
        self._thread = threading.Thread(target=self._loop, name="contactopt-gui-scene", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the scene loop, the server and the run."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.server is not None:
            self.server.stop()
        self.run.close()

    # ------------------------------------------------------------------ state for the JSON route

    def scene_rate(self) -> float:
        """Scene updates sent per second over the last two seconds."""
        with self._lock:
            now = time.perf_counter()
            ts = [t for t in self._scene_times if now - t <= 2.0]
            if len(ts) < 2:
                return 0.0
            return (len(ts) - 1) / max(ts[-1] - ts[0], 1e-9)

    def state(self) -> dict:
        """What ``GET /contactopt/state.json`` answers: ``values`` (every key), ``status``, the
        ``scene_rate_hz``, ``scene_updates``, ``clients``, ``qvel``, the last plotted values
        (``plot``, ``plot_revision``), the ``goals`` (key → target), the selected
        ``push_body``, the recent ``changes`` and ``messages``.  While no browser (websocket client)
        is connected the scene and plots are not drawn: ``scene_rate_hz`` falls to 0 and ``plot`` /
        ``plot_revision`` keep their last values."""
        run = self.run
        tel = run.telemetry()
        snap = run.snapshot()
        upd = tel["updates"]
        ms = upd.get("update_ms", np.zeros(0))
        ms = ms[np.isfinite(ms)]
        lag = upd.get("lag_ms", np.zeros(0))
        lag = lag[np.isfinite(lag)]
        return {
            "task": run.task.name, "values": run.values(), "status": tel["status"],
            "scene_rate_hz": self.scene_rate(), "scene_updates": self._scene_updates,
            "clients": len(self.server.get_clients()) if self.server is not None else 0,
            "time": snap["time"], "qpos": snap["qpos"], "qvel": snap["qvel"],
            "update_ms_median": float(np.median(ms[-50:])) if ms.size else None,
            "lag_ms_median": float(np.median(lag[-50:])) if lag.size else None,
            "plot": dict(self._last_plot), "plot_revision": self._plot_revision,
            "planner_weights": {k: v for k, v in getattr(run.session.planner, "options", {}).items()
                                if "weight." in k},
            "goals": {k: g["target"].tolist() for k, g in run.goals().items()},
            "push_body": self._push_body.value if self.server is not None else None,
            "push_handle": [float(v) for v in self._push_handle.position] if self.server is not None else None,
            "handle_scale": self._handle_scale,
            "cameras": self._cameras(),
            "changes": [{"wall": c.wall, "sim_time": c.sim_time, "what": c.what} for c in run.changes[-20:]],
            "messages": list(self._messages[-10:]),
        }

    def _cameras(self) -> list[dict]:
        """Each connected browser's camera (viser's: ``P_world = R p_camera + t`` with ``R`` from
        ``wxyz`` and ``t`` the ``position`` [m], OpenCV axes; ``fov`` vertical [rad]; ``aspect``
        the canvas width / height)."""
        if self.server is None:
            return []
        out = []
        for client in list(self.server.get_clients().values()):
            try:
                cam = client.camera
                out.append({"position": [float(v) for v in cam.position], "wxyz": [float(v) for v in cam.wxyz],
                            "fov": float(cam.fov), "aspect": float(cam.aspect)})
            except Exception:  # noqa: BLE001, S112 - a client that just left, or has sent no camera yet
                continue
        return out

    # ------------------------------------------------------------------ page

    def _message(self, text: str, client=None, error: bool = True) -> None:
        self._messages.append(text)
        self._msg_md.content = ("**⚠ " if error else "**✓ ") + text.replace("*", "\\*") + "**"
        if client is not None:
            try:
                client.add_notification("Refused" if error else "Done", text, auto_close_seconds=6.0,
                                        color="red" if error else "green")
            except Exception:  # noqa: BLE001, S110 - a client that just left
                pass

    def _build(self) -> None:
        server, run = self.server, self.run
        gui, scene = server.gui, server.scene
        model = run.model
        scene.set_up_direction("+z")
        self._plant = BodyScene(scene, model, "plant")
        self._ghost = BodyScene(scene, model, "ghost", opacity=0.25, color=(90, 160, 255), static_world=False)
        self._ghost.set_visible(False)
        self._ghost_data = mujoco.MjData(model)
        self._trace = scene.add_line_segments("/plan/trace", np.zeros((1, 2, 3)), (30, 90, 255), thickness=0.012)
        self._contacts = scene.add_point_cloud("/contacts/points", np.zeros((1, 3)), (255, 40, 40),
                                               point_size=0.04, point_shape="circle", visible=False)
        self._forces = scene.add_line_segments("/contacts/forces", np.zeros((1, 2, 3)), (255, 120, 0),
                                               thickness=0.01, visible=False)
        snap = run.snapshot()
        root = self._default_body(model)
        c = snap["xpos"][root]
        moving = [g for g in range(model.ngeom) if model.geom_bodyid[g] > 0]
        radius = max((float(np.linalg.norm(snap["xpos"][model.geom_bodyid[g]] - c) + model.geom_rbound[g])
                      for g in moving), default=1.0)
        dist = float(np.clip(3.0 * radius, 1.0, 15.0))
        look = np.array([c[0], c[1], max(c[2], 0.6 * radius)])
        server.initial_camera.look_at = tuple(look)
        server.initial_camera.position = tuple(look + np.array([0.3, -1.0, 0.3]) * dist)
        self._force_scale = 0.5 / max(float(np.sum(model.body_mass)) * 9.81, 1e-6)
        self._handle_scale = float(np.clip(0.35 * radius, 0.15, 1.5))

        self._msg_md = gui.add_markdown("")
        self._status_md = gui.add_markdown("starting…")
        tabs = gui.add_tab_group()
        with tabs.add_tab("Run"):
            self._build_run_panel(model, root)
        with tabs.add_tab("Settings"):
            self._build_settings_panels()
        with tabs.add_tab("Plots"):
            self._build_plots()
        with tabs.add_tab("Log"):
            self._log_md = gui.add_markdown("")

    @staticmethod
    def _default_body(model) -> int:
        """The body whose planned path is traced: ``torso`` if there is one, else the last body."""
        bid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "torso")
        return bid if bid > 0 else model.nbody - 1

    def _build_run_panel(self, model, root: int) -> None:
        gui, run = self.server.gui, self.run
        b_pause = gui.add_button("Pause")
        b_resume = gui.add_button("Resume")
        b_step = gui.add_button("Step")
        seed = gui.add_text("seed", str(run.seed))
        b_reset = gui.add_button("Reset (same seed)")
        b_new = gui.add_button("Reset (new seed)")

        b_pause.on_click(lambda e: run.pause())
        b_resume.on_click(lambda e: run.resume())
        b_step.on_click(lambda e: run.step(1))

        def do_reset(event, new: bool):
            try:
                s = int(seed.value.strip())
                if s < 0:
                    raise ValueError
            except ValueError:
                self._message(f"seed: expected an integer >= 0, got {seed.value!r}", event.client)
                seed.value = str(run.seed)
                return
            s = s + 1 if new else s
            run.reset(s)
            seed.value = str(s)

        b_reset.on_click(lambda e: do_reset(e, False))
        b_new.on_click(lambda e: do_reset(e, True))

        names = run.body_names()
        with gui.add_folder("Push"):
            body = gui.add_dropdown("push body", names, initial_value=names[root - 1])
            self._push_body = body
            direction = gui.add_vector3("direction", (1.0, 0.0, 0.0), step=0.1)
            impulse = gui.add_text("impulse [N s]", _fmt(round(float(model.body_subtreemass[root]) * 1.0, 3)))
            b_push = gui.add_button("Push")
            self._show_handle = gui.add_checkbox("drag handle", True)
            gui.add_markdown(f"Click a body (or choose it above) and drag the arrows: on release it gets "
                             f"{DRAG_GAIN:g} × mass × drag / {DRAG_TIME_SCALE:g} s N·s "
                             f"(at most mass × {DRAG_MAX_SPEED:g} m/s).")
        self._push_handle = self.server.scene.add_transform_controls(
            "/push/handle", scale=self._handle_scale, disable_rotations=True, depth_test=False,
            position=tuple(run.snapshot()["xipos"][root]))
        self._push_handle.on_update(self._on_push_drag)
        body.on_update(lambda e: self._place_push_handle(force=True))
        self._show_handle.on_update(lambda e: setattr(self._push_handle, "visible", self._show_handle.value))
        for b, meshes in self._plant.meshes.items():
            if b == 0:
                continue
            for h in meshes:
                h.on_click(lambda e, name=names[b - 1]: self.select_body(name))
        self._build_goals()

        def do_push(event):
            try:
                j = float(impulse.value)
                if not (math.isfinite(j) and 0 <= j <= 1e4):
                    raise ValueError
            except ValueError:
                self._message(f"impulse: expected a number in [0, 1e4] N s, got {impulse.value!r}", event.client)
                return
            d = np.asarray(direction.value, dtype=float)
            n = float(np.linalg.norm(d))
            if not (math.isfinite(n) and n > 0):
                self._message("push direction must be a non-zero vector", event.client)
                return
            run.push(body.value, j * d / n)

        b_push.on_click(do_push)

        with gui.add_folder("View"):
            self._show_contacts = gui.add_checkbox("contacts and forces", False)
            self._show_trace = gui.add_checkbox("planned path", True)
            self._show_ghost = gui.add_checkbox("ghost at horizon end", False)
            self._trace_body = gui.add_dropdown("traced body", names, initial_value=names[root - 1])
        def view_toggle(e):
            self._ghost.set_visible(self._show_ghost.value)
            self._trace.visible = self._show_trace.value
            self._trace_policy = None  # redraw the plan now, also when paused

        self._show_ghost.on_update(view_toggle)
        self._show_trace.on_update(view_toggle)
        self._trace_body.on_update(view_toggle)

        def contacts_toggle(e):
            self._contacts.visible = self._forces.visible = self._show_contacts.value

        self._show_contacts.on_update(contacts_toggle)

        with gui.add_folder("Output"):
            clip = gui.add_text("clip seconds", "3")
            b_rec = gui.add_button("Record clip")
            export = gui.add_text("settings file", f"{run.task.name}-gui.toml")
            b_export = gui.add_button("Export settings")

        def do_record(event):
            if self._recording is not None:
                self._message("a clip is being recorded already", event.client)
                return
            try:
                secs = float(clip.value)
                if not (math.isfinite(secs) and 0 < secs <= 60):
                    raise ValueError
            except ValueError:
                self._message(f"clip seconds: expected a number in (0, 60], got {clip.value!r}", event.client)
                return
            t, _ = run.state()
            self._recording = {"until": t + secs, "t": [], "qpos": [], "qvel": [], "client": event.client,
                               "mocap_pos": None, "mocap_quat": None}
            self._message(f"recording {secs:g} simulated seconds…", event.client, error=False)

        def do_export(event):
            name = export.value.strip()
            if not name or Path(name).name != name or not name.endswith(".toml"):
                self._message(f"settings file: a plain file name ending in .toml, got {name!r}", event.client)
                return
            try:
                path = run.export_settings(self.out_dir / name)
            except (ContactoptError, OSError) as exc:
                self._message(f"export settings: {exc}", event.client)
                return
            self._message(f"settings written to {path}", event.client, error=False)

        b_rec.on_click(do_record)
        b_export.on_click(do_export)

    # ------------------------------------------------------------------ drag to push, goals

    def select_body(self, name: str) -> None:
        """Make ``name`` the push body (what clicking a body does); the drag handle moves to it.

        Raises:
          ParameterError: the plant has no body ``name``.
        """
        names = self.run.body_names()
        if name not in names:
            raise ParameterError(f"select body: the plant has no body {name!r} (bodies: {', '.join(names)})")
        self._push_body.value = name
        self._place_push_handle(force=True)

    def _push_bid(self) -> int:
        return self.run.body_names().index(self._push_body.value) + 1

    def _place_push_handle(self, snap=None, force: bool = False) -> None:
        """Put the drag handle at the push body's centre of mass (unless it is held)."""
        if self._dragging and not force:
            return
        if snap is None:
            snap = self.run.snapshot()
        pos = snap["xipos"][self._push_bid()]
        if force or not np.allclose(self._push_handle.position, pos, atol=1e-4):
            self._push_handle.position = tuple(float(v) for v in pos)

    async def _on_push_drag(self, event) -> None:
        # async: viser runs it on its event loop, so the phases arrive in order
        if event.phase == "start":
            self._dragging = True
            self._drag_start = np.array(event.target.position, dtype=float)
            return
        if event.phase != "end":
            return
        start, self._drag_start = self._drag_start, None
        self._dragging = False
        if start is not None:
            self.drag_push(self._push_body.value, np.array(event.target.position, dtype=float) - start,
                           event.client)
        self._place_push_handle(force=True)  # the handle snaps back to the body

    def drag_push(self, body: str, displacement, client=None):
        """What releasing the drag handle does: :meth:`LiveRun.drag_push` of ``body`` by the drag
        ``displacement`` (3,) [m]; the result or refusal is shown in the page.  Returns
        :meth:`LiveRun.drag_push`'s dict, or None when refused."""
        try:
            out = self.run.drag_push(body, displacement)
        except ContactoptError as exc:
            self._message(str(exc), client)
            return None
        j = out["impulse"]
        self._message(f"pushed {body} with [{', '.join(f'{v:.3g}' for v in j)}] N s"
                      + (" (clamped)" if out["clamped"] else ""), client, error=False)
        return out

    def _build_goals(self) -> None:
        """One draggable marker and one text field per goal of the task's cost (:meth:`LiveRun.goals`)."""
        goals = self.run.goals()
        if not goals:
            return
        gui, scene = self.server.gui, self.server.scene
        with gui.add_folder("Goals"):
            gui.add_markdown("Drag a green goal, or type x, y, z [m]; the planner uses it from its next update.")
            for i, (key, g) in enumerate(goals.items()):
                axes = "".join(a for a, on in zip("xyz", g["axes"]) if on)
                f = gui.add_text(key, _fmt(tuple(g["target"])), hint=f"target of {g['residual']} {g['term']} "
                                 f"(axes {axes} are used)")
                self._goal_fields[key] = f
                f.on_update(lambda e, key=key: self._goal_typed(key, e))
                h = scene.add_transform_controls(f"/goals/g{i}", scale=0.6 * self._handle_scale,
                                                 active_axes=tuple(bool(a) for a in g["axes"]),
                                                 disable_rotations=True, depth_test=False,
                                                 position=tuple(g["target"]))
                scene.add_icosphere(f"/goals/g{i}/marker", radius=0.08 * self._handle_scale / 0.35,
                                    color=(40, 200, 80), opacity=0.8)
                h.on_update(lambda e, key=key: self._on_goal_drag(key, e))
                self._goal_handles[key] = h

    async def _on_goal_drag(self, key: str, event) -> None:
        if event.phase == "start":
            self._goal_dragging.add(key)
        elif event.phase == "end":
            self._goal_dragging.discard(key)
            self.move_goal(key, np.array(event.target.position, dtype=float), event.client)

    def _goal_typed(self, key: str, event) -> None:
        if event.client is None:
            return
        self.move_goal(key, self._goal_fields[key].value, event.client)

    def move_goal(self, key: str, target, client=None):
        """What dropping a goal marker (or typing into its field) does: :meth:`LiveRun.set_goal`;
        the marker and the field show the target in use.  Returns it, or None when refused."""
        try:
            out = self.run.set_goal(key, target)
            msg = (f"{key} = {_fmt(tuple(out))} (from the next planner update)", False)
        except ContactoptError as exc:
            out, msg = None, (str(exc), True)
        g = self.run.goals().get(key)
        if g is not None:
            self._goal_handles[key].position = tuple(float(v) for v in g["target"])
            self._goal_fields[key].value = _fmt(tuple(g["target"]))
        self._message(msg[0], client, error=msg[1])
        return out

    def _field(self, key: str, kind: str, value, choices=(), doc: str = ""):
        gui = self.server.gui
        if kind == "choice":
            h = gui.add_dropdown(key, [str(c) for c in choices], initial_value=str(value), hint=doc or None)
        elif kind == "bool":
            h = gui.add_checkbox(key, bool(value), hint=doc or None)
        else:
            h = gui.add_text(key, _fmt(value), hint=doc or None)
        self._fields[key] = (h, kind)

        def cb(event, key=key, h=h, kind=kind):
            if event.client is None:  # our own refresh
                return
            raw = h.value if kind in ("choice", "bool") else _parse_field(kind, h.value)
            try:
                out = self.run.set({key: raw})
            except ContactoptError as exc:
                self._message(str(exc), event.client)
                self._refresh_fields()
                return
            if out["_clamped"]:
                self._message(f"{key}: clamped to {_fmt(out[key])} (safe range)", event.client)
            else:
                self._message(f"{key} = {_fmt(out.get(key))} (from the next planner update)", event.client,
                              error=False)
            self._refresh_fields()

        h.on_update(cb)
        return h

    def _build_settings_panels(self) -> None:
        gui, run = self.server.gui, self.run
        rows = run.session.settings()
        self._folders = {}
        for group, title in _GROUPS:
            self._folders[group] = gui.add_folder(title, expand_by_default=group != "terminal")
            with self._folders[group]:
                if group == "planner":
                    planners = list(run.session.planners())
                    self._planner_dd = gui.add_dropdown("planner", planners, initial_value=run.session.planner_name)
                    self._planner_dd.on_update(self._switch_planner)
                for r in rows:
                    if r.group == group:
                        h = self._field(r.key, r.kind, r.value, r.choices, r.doc)
                        if group == "planner":
                            self._planner_handles.append(h)
        with gui.add_folder("Plant dynamics"):
            for key, (default, doc) in PLANT_KEYS.items():
                self._field(key, "float", run.plant_values()[key], doc=doc)
            self._field("slowdown", "float", run.slowdown, doc="wall seconds per simulated second")

    def _switch_planner(self, event) -> None:
        if event.client is None:
            return
        name = self._planner_dd.value
        try:
            self.run.set_planner(name)
        except ContactoptError as exc:
            self._message(str(exc), event.client)
            self._planner_dd.value = self.run.session.planner_name
            return
        for h in self._planner_handles:
            self._fields.pop(h.label, None)
            h.remove()
        self._planner_handles = []
        with self._folders["planner"]:
            for r in self.run.session.settings():
                if r.group == "planner":
                    self._planner_handles.append(self._field(r.key, r.kind, r.value, r.choices, r.doc))
        self._message(f"planner = {name} (from the next update)", event.client, error=False)

    def _refresh_fields(self) -> None:
        values = self.run.values()
        for key, (h, kind) in list(self._fields.items()):
            if key not in values:
                continue
            v = values[key]
            want = bool(v) if kind == "bool" else (str(v) if kind == "choice" else _fmt(v))
            if h.value != want:
                h.value = want
        if self._planner_dd.value != self.run.session.planner_name:
            self._planner_dd.value = self.run.session.planner_name

    def _build_plots(self) -> None:
        gui = self.server.gui
        keys = ["cost"] + ["cost." + k for k in self.run._term_keys]
        z = np.zeros(2)

        def series(labels):
            out = [{"label": "t [s]"}]
            for i, lab in enumerate(labels):
                out.append({"label": lab, "stroke": _COLORS[i % len(_COLORS)], "width": 2 if i == 0 else 1})
            return tuple(out)

        self._cost_keys = keys
        self._plots = {
            "cost": gui.add_uplot((z,) * (len(keys) + 1), series(["total"] + self.run._term_keys),
                                  title="running cost (plant)", aspect=1.6),
            "update_ms": gui.add_uplot((z, z), series(["update ms"]), title="planner update time [ms]", aspect=2.2),
            "lag_ms": gui.add_uplot((z, z), series(["lag ms"]), title="policy lag [ms]", aspect=2.2),
            "rtf": gui.add_uplot((z, z), series(["real-time factor"]), title="real-time factor", aspect=2.2),
            "success": gui.add_uplot((z, z), series(["success"]), title="success test (1 = holds)", aspect=2.2),
        }

    # ------------------------------------------------------------------ loop

    def _loop(self) -> None:
        period = 1.0 / self.scene_hz
        next_tick = time.perf_counter()
        next_plot = 0.0
        next_trace = 0.0
        last_version = recorded_version = None
        was_watched = False
        while not self._stop.is_set():
            now = time.perf_counter()
            try:
                contacts = self._show_contacts.value
                watched = bool(self.server.get_clients())
                if was_watched and not watched:
                    self._dragging, self._drag_start = False, None  # the last client left mid-drag
                was_watched = watched
                if not watched:
                    # nobody to draw for: no scene, trace or plot messages (their serialization
                    # holds the GIL the planner needs); a recording still samples the plant
                    if self._recording is not None:
                        snap = self.run.snapshot()
                        if snap["version"] != recorded_version:
                            recorded_version = snap["version"]
                            self._record(snap)
                    self._plant.resend()  # the next client gets every body, the plan and the plots at once
                    self._trace_policy = None
                    next_plot = 0.0
                    last_version = snap = None
                else:
                    snap = self.run.snapshot(contacts=contacts)
                if snap is not None and snap["version"] != last_version:
                    last_version = snap["version"]
                    with self.server.atomic():
                        self._plant.update(snap["xpos"], snap["xquat"])
                        if contacts:
                            self._draw_contacts(snap)
                        self._place_push_handle(snap)
                    with self._lock:
                        self._scene_times.append(now)
                        self._scene_times = self._scene_times[-400:]
                        self._scene_updates += 1
                    if self._recording is not None:
                        recorded_version = last_version
                        self._record(snap)
                if watched and now >= next_trace:
                    next_trace = now + 0.1
                    self._draw_plan()
                if watched and now >= next_plot:
                    next_plot = now + 1.0 / self.plot_hz
                    self._update_plots()
            except Exception as exc:  # noqa: BLE001 - keep serving; show what went wrong
                self._messages.append(f"gui loop: {type(exc).__name__}: {exc}")
            next_tick += period
            delay = next_tick - time.perf_counter()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_tick = time.perf_counter()

    def _draw_contacts(self, snap) -> None:
        pos, force = snap["contact_pos"], snap["contact_force"]
        if pos.shape[0] == 0:
            pos = np.full((1, 3), -1e3)
            force = np.zeros((1, 3))
        self._contacts.points = pos.astype(np.float32)
        seg = np.stack([pos, pos + force * self._force_scale], axis=1)
        self._forces.points = seg.astype(np.float32)

    def _draw_plan(self) -> None:
        session = self.run.session
        policy = session.policy
        if policy is None or policy is self._trace_policy:
            return
        self._trace_policy = policy
        traj = session.planned_trajectory()
        if traj is None:
            return
        _, qpos = traj
        model, d = self.run.model, self._ghost_data
        names = self.run.body_names()
        try:
            bid = names.index(self._trace_body.value) + 1
        except ValueError:
            bid = 1
        step = max(1, qpos.shape[0] // 60)
        idx = list(range(0, qpos.shape[0], step))
        if idx[-1] != qpos.shape[0] - 1:
            idx.append(qpos.shape[0] - 1)
        pts = np.zeros((len(idx), 3))
        for j, i in enumerate(idx):
            d.qpos[:] = qpos[i]
            mujoco.mj_kinematics(model, d)
            pts[j] = d.xpos[bid]
        with self.server.atomic():
            if self._show_trace.value and len(pts) >= 2:
                self._trace.points = np.stack([pts[:-1], pts[1:]], axis=1).astype(np.float32)
            if self._show_ghost.value:
                self._ghost.update(d.xpos, d.xquat)

    def _record(self, snap) -> None:
        rec = self._recording
        if rec["t"] and snap["time"] < rec["t"][-1]:  # a reset: start over
            rec["t"], rec["qpos"], rec["qvel"] = [], [], []
        if not rec["t"] or snap["time"] > rec["t"][-1]:
            rec["t"].append(snap["time"])
            rec["qpos"].append(snap["qpos"])
            rec["qvel"].append(snap["qvel"])
            d = self.run.data
            if self.run.model.nmocap:
                rec["mocap_pos"], rec["mocap_quat"] = d.mocap_pos.copy(), d.mocap_quat.copy()
        if snap["time"] >= rec["until"]:
            self._recording = None
            threading.Thread(target=self._write_clip, args=(rec,), daemon=True).start()

    def _write_clip(self, rec) -> None:
        from ..mpc.outputs import write_video

        path = self.out_dir / f"{self.run.task.name}-{time.strftime('%Y%m%d-%H%M%S')}.mp4"
        result = SimpleNamespace(time=np.array(rec["t"]), qpos=np.array(rec["qpos"]), qvel=np.array(rec["qvel"]),
                                 mocap_pos=rec["mocap_pos"], mocap_quat=rec["mocap_quat"])
        try:
            model = self.run.task.load_plant()
            n = write_video(model, result, path, fps=30.0, width=640, height=480)
            self._message(f"clip written to {path} ({n} frames)", rec["client"], error=False)
        except Exception as exc:  # noqa: BLE001 - reported in the page
            self._message(f"record clip: {type(exc).__name__}: {exc}", rec["client"])

    def _update_plots(self) -> None:
        tel = self.run.telemetry()
        plant, upd, st = tel["plant"], tel["updates"], tel["status"]
        n = self.plot_points
        if "t" in plant and len(plant["t"]) >= 2:
            t = plant["t"][-n:]
            cols = [_finite(plant.get(k, np.full(len(plant["t"]), np.nan))[-n:]) for k in self._cost_keys]
            self._plots["cost"].data = (t, *cols)
            self._plots["rtf"].data = (t, _finite(plant["rtf"][-n:]))
            self._plots["success"].data = (t, plant["success"][-n:])
            self._last_plot = {k: float(c[-1]) for k, c in zip(self._cost_keys, cols)}
            self._plot_revision += 1
        for key in ("update_ms", "lag_ms"):
            if key in upd:
                ok = np.isfinite(upd[key])
                if ok.sum() >= 2:
                    self._plots[key].data = (upd["t"][ok][-n:], upd[key][ok][-n:])
        ms = upd.get("update_ms", np.zeros(0))
        ms = ms[np.isfinite(ms)]
        lag = upd.get("lag_ms", np.zeros(0))
        lag = lag[np.isfinite(lag)]
        cost = plant.get("cost", np.zeros(0))
        lines = [
            f"**t = {st['time']:.2f} s** · seed {st['seed']} · {st['planner']} · "
            + ("**paused**" if st["paused"] else f"running ×{st['slowdown']:g} slowdown"),
            f"cost {cost[-1]:.4g} · update {np.median(ms[-20:]) if ms.size else math.nan:.1f} ms · "
            f"lag {np.median(lag[-20:]) if lag.size else math.nan:.1f} ms · RTF {st['rtf']:.2f} · "
            f"scene {self.scene_rate():.0f} Hz" if cost.size else "waiting for the first plan…",
            "success: " + ("**yes**" + (f" (held from t = {st['succeeded_at']:.2f} s)"
                                        if st["succeeded_at"] is not None else "") if st["success"] else "no"),
        ]
        if st["error"]:
            lines.append(f"**stopped: {st['error']}**")
        if self.run.rebuild_error:
            lines.append(f"planner refused the last change: {self.run.rebuild_error}")
        self._status_md.content = "  \n".join(lines)
        self._log_md.content = "  \n".join(
            f"t={c.sim_time:.3f} s · {time.strftime('%H:%M:%S', time.localtime(c.wall))} · {c.what}"
            for c in reversed(self.run.changes[-15:])) or "no changes yet"
