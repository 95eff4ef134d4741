"""Command-line parts of the policy server: ``contactopt serve`` and ``contactopt run --remote``.

:func:`add_arguments` registers them on the main parser (between the markers in
``contactopt/cli.py``); nothing here imports grpc until a command runs.
"""

from __future__ import annotations

import logging
import math
import sys

from ..errors import ParameterError

__all__ = ["add_arguments", "cmd_serve", "remote_run", "run_remote"]


def add_arguments(sub) -> None:
    """Add the ``serve`` subcommand to ``sub`` and ``--remote``/``--token-file``/``--tls-ca`` to ``run``."""
    s = sub.add_parser("serve", help="serve a task's planner to remote plants over gRPC (contactopt[server])")
    s.add_argument("task", metavar="TASK_OR_FILE",
                   help="bundled task with a planner-independent form, or a task file")
    s.add_argument("--planner", default=None, help="default planner of a session (default: the task's first)")
    s.add_argument("--set", action="append", default=None, metavar="KEY=VALUE", dest="settings",
                   help="planner option or cost weight every session starts with (repeatable)")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other needs --token-file)")
    s.add_argument("--port", type=int, default=50051, help="port (default 50051; 0 picks a free one)")
    s.add_argument("--token-file", default=None, metavar="F", help="file holding the token clients must send")
    s.add_argument("--tls-cert", default=None, metavar="C", help="PEM certificate for TLS")
    s.add_argument("--tls-key", default=None, metavar="K", help="PEM private key for TLS")
    s.add_argument("--max-sessions", type=int, default=4, metavar="N", help="plants served at once (default 4)")
    s.add_argument("--idle-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="free a session not heard from for this long (default 30)")
    s.add_argument("--max-message-bytes", type=int, default=4 << 20, metavar="BYTES",
                   help="largest message accepted (default 4 MiB)")
    s.set_defaults(func=cmd_serve)

    r = sub.choices["run"]
    r.add_argument("--remote", default=None, metavar="HOST:PORT",
                   help="plan on the policy server at HOST:PORT (contactopt serve); the plant runs here")
    r.add_argument("--token-file", default=None, metavar="F", help="--remote: file holding the server's token")
    r.add_argument("--tls-ca", default=None, metavar="PEM",
                   help="--remote: certificate (authority) of a TLS server")
    local = r.get_default("func")

    def run(args):
        """``contactopt run``: with ``--remote``, :func:`run_remote`; otherwise the local run."""
        if args.remote is not None:
            return run_remote(args)
        if args.token_file is not None or args.tls_ca is not None:
            raise ParameterError("--token-file and --tls-ca apply to --remote runs")
        return local(args)

    r.set_defaults(func=run)


def _settings(items) -> dict:
    out = {}
    for text in items or ():
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"--set {text!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def cmd_serve(args) -> int:
    """``contactopt serve``: run a :class:`~contactopt.remote.server.PolicyServer` until interrupted."""
    import os

    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # gRPC's C-core log lines; refusals are logged below
    from .server import PolicyServer, load_served_task, read_token

    task, default = load_served_task(args.task)
    token = read_token(args.token_file) if args.token_file else None
    if not math.isfinite(args.idle_timeout) or args.idle_timeout <= 0:
        raise ParameterError(f"--idle-timeout must be positive seconds, got {args.idle_timeout}")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s contactopt serve: %(levelname)s %(message)s")
    server = PolicyServer(task, planner=args.planner or default, host=args.host, port=args.port, token=token,
                          tls_cert=args.tls_cert, tls_key=args.tls_key, max_sessions=args.max_sessions,
                          idle_timeout=args.idle_timeout, max_message_bytes=args.max_message_bytes,
                          settings=_settings(args.settings))
    # a bad key fails here, once, not in every session
    from ..mpc import registry

    registry.parse_settings(server.planner_name, task, server.settings)
    server.start()
    print(f"contactopt serve: task {task.name!r}, planner {server.planner_name}, listening on {server.address}",
          flush=True)
    try:
        server.wait()
    finally:
        server.stop()
    return 0


def run_remote(args) -> int:
    """``contactopt run TASK_OR_FILE --remote HOST:PORT``: the plant here, the planner on the server.

    The run uses the ordinary runner (``--mode async`` by default, real time; ``--mode sync``
    applies each policy after its measured round trip); the report adds ``remote``: round trip,
    planning and transport times (median and p99, ms) and reconnections.
    """
    from ..cli import _check_run_args, _parse_push, _print_report, load_options_file
    from .server import load_served_task, read_token

    if args.task is None:
        raise ParameterError("--remote needs a task (the same one the server serves)")
    if args.deterministic or args.lag is not None:
        raise ParameterError("--remote measures the lag; --lag and --deterministic do not apply")
    task, _ = load_served_task(args.task)
    _check_run_args(args)
    settings = {**load_options_file(args.options), **_parse_settings_cli(args.settings)}
    token = read_token(args.token_file) if args.token_file else None
    result, plant, report = remote_run(
        task, args.remote, token=token, tls_ca=args.tls_ca, planner=args.planner, settings=settings,
        seed=args.seed, seconds=args.seconds, mode=args.mode or "async", slowdown=args.slowdown or 1.0,
        pushes=tuple(_parse_push(p) for p in args.push or ()), mass_scale=args.mass_scale or 1.0,
        friction_scale=args.friction_scale or 1.0, gain_scale=args.gain_scale or 1.0, latency=args.latency or 0.0)
    from ..mpc.outputs import plot_mpc, write_video

    if args.video is not None:
        report["video_frames"] = write_video(plant, result, args.video, fps=args.fps, width=args.width,
                                             height=args.height, camera=args.camera)
        report["video"] = str(args.video)
    if args.plot is not None:
        plot_mpc(task.name, result, args.plot, metric_label="running cost")
        report["plot"] = str(args.plot)
    if not args.json:  # the table skips nested dicts: flatten the remote numbers
        report.update({f"remote_{k}": v for k, v in report.pop("remote").items()})
    _print_report(report, args.json)
    return 0 if report.get("success", True) else 3


def remote_run(task, address: str, *, token=None, tls_ca=None, planner=None, settings=None, seed: int = 0,
               seconds=None, mode: str = "async", slowdown: float = 1.0, pushes=(), mass_scale: float = 1.0,
               friction_scale: float = 1.0, gain_scale: float = 1.0, latency: float = 0.0,
               stop_on_success: bool = False):
    """Run ``task`` closed loop with the plant here and the planner on the server at ``address``.

    The same run as :func:`contactopt.mpc.task_runner.run_task` (seeded initial state, the
    task's success and failure tests) with a :class:`~contactopt.remote.client.RemotePlanner`;
    ``mass_scale``, ``friction_scale``, ``gain_scale`` and ``latency`` (sync mode) are the plant's
    model errors as in ``run_task``.

    Returns:
      ``(MPCResult, plant model, report)``; the report has the ``run`` keys and ``remote``
      (round trip, planning and transport [ms], median and p99).
    """
    import mujoco

    from ..mpc.runner import MPCSettings, model_error, perturb_model, run_mpc
    from ..mpc.task_runner import _metric, check_seed
    from .client import RemotePlanner

    seed = check_seed(seed)
    nominal = task.load_plant()
    plant = nominal
    errors = model_error(mass_scale, friction_scale, gain_scale, latency)
    if mass_scale != 1.0 or friction_scale != 1.0 or gain_scale != 1.0:
        plant = perturb_model(nominal, mass_scale=mass_scale, friction_scale=friction_scale, gain_scale=gain_scale)
    data = mujoco.MjData(plant)
    task.reset(plant, data, seed)
    seconds = task.duration if seconds is None else float(seconds)
    mpc = MPCSettings(duration=seconds, mode=mode, slowdown=slowdown, pushes=tuple(pushes),
                      success_hold=task.success_hold, stop_on_success=stop_on_success, added_latency=latency)
    remote = RemotePlanner(address, token, tls_ca, planner=planner, settings=settings, seed=seed, model=nominal)
    try:
        result = run_mpc(remote, plant, data, mpc, success=task.success, metric=_metric(task, plant),
                         failure=task.failure)
    finally:
        remote.close()
    report = {"task": task.name, "planner": remote.planner_name, "seed": seed, **result.summary(),
              "remote": remote.summary()}
    if errors:
        report["model_error"] = errors
    return result, plant, report


def _parse_settings_cli(items) -> dict:
    if items and "help" in items:
        raise ParameterError("--set help lists the keys of a local run; with --remote, ask the server "
                             "(PolicyClient.settings())")
    return _settings(items)
