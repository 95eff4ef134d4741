"""``contactopt gui TASK_OR_FILE``: serve the live GUI of a task and print its URL."""

from __future__ import annotations

import ipaddress
import math
import time

from ..errors import ParameterError

__all__ = ["add_gui_parser", "cmd_gui", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def add_gui_parser(sub) -> None:
    """Add the ``gui`` subcommand to the ``contactopt`` subparsers ``sub``."""
    from pathlib import Path

    g = sub.add_parser("gui", help="serve a browser GUI that runs a task live and tunes it while it runs")
    g.add_argument("task", metavar="TASK_OR_FILE",
                   help="bundled task name (with a planner-independent form) or a Python task file")
    g.add_argument("--planner", default=None, help="planner to start with (switchable in the page)")
    g.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; another needs --token)")
    g.add_argument("--port", type=int, default=8080, help="port (default 8080; the next free one if taken)")
    g.add_argument("--seed", type=int, default=0, help="seed of the initial state (default 0)")
    g.add_argument("--token", default=None,
                   help="secret every browser must present (part of the printed URL); required for a "
                        "non-loopback --host")
    g.add_argument("--slowdown", type=float, default=None,
                   help="wall seconds per simulated second (default: a bundled task's target, "
                        "e.g. 2 for humanoid-getup; 1 = real time for a task file)")
    g.add_argument("--set", action="append", default=None, metavar="KEY=VALUE", dest="settings",
                   help="initial planner option, cost weight, model.* or plant.* key (repeatable)")
    g.add_argument("--options", type=Path, default=None, metavar="FILE.toml",
                   help="initial settings from a TOML file of --set keys (e.g. one the GUI exported)")
    g.add_argument("--out-dir", type=Path, default=Path("."), metavar="DIR",
                   help="folder for exported settings and recorded clips (default: the current one)")
    g.add_argument("--scene-hz", type=float, default=40.0, help="scene updates per second (default 40)")
    g.add_argument("--pause-at", type=float, default=None, metavar="SECONDS",
                   help="pause the plant when it reaches this simulated time (again after each reset)")
    g.add_argument("--seconds", type=float, default=None,
                   help="stop after this many wall seconds (default: run until Ctrl-C)")
    g.set_defaults(func=cmd_gui)


def load_gui_task(name: str):
    """``(task, target slowdown)``: the :class:`~contactopt.task.Task` of a task file or a bundled
    task name, and the wall seconds per simulated second it is meant to run at
    (:attr:`~contactopt.tasks.TaskSpec.target_slowdown`; 1.0 for a task file)."""
    from ..cli import _is_task_file

    if _is_task_file(name):
        from ..task import load_task_file

        return load_task_file(name), 1.0
    from ..tasks import load_task

    spec = load_task(name)
    task = spec.task()
    if task is None:
        raise ParameterError(f"task {name!r} has no planner-independent form; the GUI runs tasks that do "
                             "and task files")
    return task, spec.target_slowdown


def cmd_gui(args) -> int:
    """Run the GUI until Ctrl-C (or ``--seconds``); prints the URL first."""
    from ..cli import _parse_settings, load_options_file

    if not is_loopback(args.host) and not args.token:
        raise ParameterError(f"--host {args.host} is reachable from other machines: give --token SECRET "
                             "(or use --host 127.0.0.1 and an SSH tunnel)")
    if args.token is not None and (len(args.token) < 8 or not args.token.isprintable() or " " in args.token):
        raise ParameterError("--token must be at least 8 printable characters without spaces")
    if not (1 <= args.port <= 65535):
        raise ParameterError(f"--port must be in 1..65535, got {args.port}")
    if args.seed < 0:
        raise ParameterError(f"--seed must be >= 0, got {args.seed}")
    if args.slowdown is not None and not (math.isfinite(args.slowdown) and args.slowdown > 0):
        raise ParameterError(f"--slowdown must be a positive number, got {args.slowdown}")
    if not (math.isfinite(args.scene_hz) and 0 < args.scene_hz <= 240):
        raise ParameterError(f"--scene-hz must be in (0, 240], got {args.scene_hz}")
    if not args.out_dir.is_dir():
        raise ParameterError(f"--out-dir {args.out_dir}: no such directory")
    settings = {**load_options_file(args.options), **_parse_settings(args.settings)}
    task, target_slowdown = load_gui_task(args.task)
    slowdown = args.slowdown if args.slowdown is not None else target_slowdown

    from ..mpc.live import LiveRun
    from .app import GuiApp

    if args.pause_at is not None and not (math.isfinite(args.pause_at) and args.pause_at > 0):
        raise ParameterError(f"--pause-at must be a positive number of seconds, got {args.pause_at}")
    run = LiveRun(task, args.planner, settings=settings, seed=args.seed, slowdown=slowdown)
    run.pause_at = args.pause_at
    app = GuiApp(run, host=args.host, port=args.port, token=args.token, out_dir=args.out_dir,
                 scene_hz=args.scene_hz)
    try:
        app.start()
        print(f"contactopt gui: {task.name} with {run.session.planner_name} at {app.url}", flush=True)
        start = time.monotonic()
        while args.seconds is None or time.monotonic() - start < args.seconds:
            time.sleep(0.2)
    finally:
        app.close()
    return 0
