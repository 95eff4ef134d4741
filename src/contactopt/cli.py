"""The ``contactopt`` command line: ``models``, ``simulate``, ``bench``, ``warmup``, ``run``.

Every user error is one line on stderr (``contactopt: error: ...``) and exit
status 1; usage errors exit 2 (argparse); an interrupt exits 130 and leaves no
partial output files.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from . import __version__
from .errors import ContactoptError, ParameterError

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    p = argparse.ArgumentParser(
        prog="contactopt",
        description="Optimization-based control through contact on MuJoCo models.",
    )
    p.add_argument("--version", action="version", version=f"contactopt {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    m = sub.add_parser("models", help="list the bundled models")
    m.add_argument("--json", action="store_true", help="print JSON instead of a table")
    m.set_defaults(func=cmd_models)

    s = sub.add_parser("simulate", help="simulate a model passively (MuJoCo's or the convex contact model)")
    s.add_argument("model", metavar="MODEL_OR_PATH", help="bundled model name or MJCF/URDF file")
    s.add_argument("--seconds", type=float, default=5.0, help="simulated duration in seconds (default 5)")
    s.add_argument("--timestep", type=float, default=None, help="override the model's time step [s]")
    s.add_argument("--keyframe", default="home", help="initial keyframe name (default: home, else qpos0)")
    s.add_argument("--video", type=Path, default=None, metavar="PATH", help="write an H.264 MP4 here")
    s.add_argument("--plot", type=Path, default=None, metavar="PATH",
                   help="write a PNG of energy, contact count and normal force")
    s.add_argument("--json", action="store_true", help="print a JSON summary")
    s.add_argument("--camera", default="video", help="camera name (default: 'video', else automatic)")
    s.add_argument("--width", type=int, default=640, help="video width in pixels (default 640)")
    s.add_argument("--height", type=int, default=480, help="video height in pixels (default 480)")
    s.add_argument("--fps", type=float, default=30.0, help="video frame rate (default 30)")
    s.add_argument("--contact", choices=("mujoco", "convex", "smooth"), default="mujoco",
                   help="contact model: MuJoCo's own (default), the convex invertible model, or the "
                        "smooth model of the iLQG paper")
    s.add_argument("--kappa", type=float, default=None,
                   help="barrier weight of the convex contact model (default 0.1, the paper's)")
    s.add_argument("--eta", type=float, default=None,
                   help="η of the smooth contact model (default 0.7, the paper's simulator)")
    s.set_defaults(func=cmd_simulate)

    b = sub.add_parser("bench", help="run a named benchmark (table, or JSON with --json)")
    b.add_argument("name", nargs="?", metavar="NAME", help="benchmark name; omit to list them")
    b.add_argument("--model", action="append", metavar="PATH",
                   help="model name or file to benchmark (repeatable; default: the benchmark's set)")
    b.add_argument("--json", action="store_true", help="print JSON instead of a table")
    b.add_argument("--out", type=Path, default=None, metavar="FILE", help="also write the JSON to FILE")
    b.add_argument("--min-time", type=float, default=0.2,
                   help="seconds spent timing each measurement (default 0.2)")
    b.add_argument("--plots", type=Path, default=None, metavar="DIR",
                   help="write the benchmark's PNG figures into this existing directory")
    b.add_argument("--seeds", default=None, metavar="N|A:B",
                   help="seeded closed-loop runs per task: a count N (seeds 0..N-1) or a range A:B "
                        "(bench ilqg/idto: a count, default 10; bench tasks: default 0:8)")
    b.add_argument("--tasks", action="append", default=None, metavar="TASK",
                   help="bench tasks: a bundled task name or task file (repeatable or comma-separated; "
                        "default: every bundled task); task:NAME runs a bundled task's planner-independent "
                        "form with the generic planners even where the task has its own runner")
    b.add_argument("--planner", default=None, help="bench tasks: run only this planner")
    b.add_argument("--load", action="store_true",
                   help="bench tasks: keep one core busy with another process for the whole run")
    b.add_argument("--deterministic", action="store_true",
                   help="bench tasks: pairs that measure the lag use a fixed lag calibrated once on this machine")
    b.add_argument("--lag", type=float, default=None, metavar="SECONDS",
                   help="bench tasks: a fixed sync-mode lag for every pair (default: each task's own)")
    b.add_argument("--async", dest="asynchronous", action="store_true",
                   help="bench tasks: run every pair asynchronously in real time (planner and plant in "
                        "separate threads, each task at its own target slowdown) instead of in sync mode")
    b.add_argument("--repeats", type=int, default=None, metavar="N",
                   help="interleaved pairs of timed blocks behind each ratio (bench contact/gdd/noise; "
                        "default 11, at least 5)")
    b.add_argument("--horizon-sweep", action="store_true",
                   help="bench idto: only time per iteration against horizon, both underactuation "
                        "methods, with the fitted growth exponent (the IDTO paper's Fig. 4)")
    b.add_argument("--records", type=int, default=None, metavar="N",
                   help="states per model in the recorded dataset (bench gdd; default 20000)")
    b.add_argument("--minutes", type=float, default=None, metavar="M",
                   help="bench soak: simulated minutes per soak (default 10)")
    b.add_argument("--soaks", action="append", default=None, metavar="NAME",
                   help="bench soak: acrobot-ilqg, quadruped-idto, humanoid-reach-gdd (repeatable or "
                        "comma-separated; default all)")
    b.set_defaults(func=cmd_bench)

    w = sub.add_parser("warmup", help="compile the numba kernels now (cached on disk), so that a first "
                                      "run does not stall for minutes")
    w.add_argument("--family", action="append", default=None, metavar="NAME",
                   help="only these kernel families (repeatable or comma-separated; default all: "
                        "gdd, ilqg, idto, convex)")
    w.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="families compiled at once, one child process each (default: the CPU count)")
    w.add_argument("--json", action="store_true", help="print JSON instead of one line per family")
    w.set_defaults(func=cmd_warmup)

    r = sub.add_parser("run", help="run a task with a planner (lists the tasks when none is given)")
    r.add_argument("task", nargs="?", metavar="TASK_OR_FILE",
                   help="bundled task name, or a Python file that defines TASK = contactopt.Task(...); "
                        "omit to list the tasks")
    r.add_argument("--planner", default=None,
                   help="ilqg, ilqg-textbook, idto or gdd (default: the task's first; ilqg for a "
                        "task file without planner_options)")
    r.add_argument("--set", action="append", default=None, metavar="KEY=VALUE", dest="settings",
                   help="planner option or cost weight, e.g. horizon=0.5 or weight.qpos=10 (repeatable; "
                        "task files only); --set help lists the keys")
    r.add_argument("--options", type=Path, default=None, metavar="FILE.toml",
                   help="a TOML file of --set keys (e.g. exported by the GUI); --set overrides it")
    r.add_argument("--save-trajectory", type=Path, default=None, metavar="FILE.npz",
                   help="write time, qpos, qvel, ctrl and each update's cost, compute time and lag (task files)")
    r.add_argument("--camera", default="video", help="video camera name (default: 'video', else automatic)")
    r.add_argument("--width", type=int, default=640, help="video width in pixels (default 640)")
    r.add_argument("--height", type=int, default=480, help="video height in pixels (default 480)")
    r.add_argument("--fps", type=float, default=30.0, help="video frame rate (default 30)")
    r.add_argument("--seconds", type=float, default=None, help="simulated seconds (default: the task's)")
    r.add_argument("--seed", type=int, default=0, help="seed of the initial state (default 0)")
    r.add_argument("--video", type=Path, default=None, metavar="PATH", help="write an H.264 MP4 here")
    r.add_argument("--plot", type=Path, default=None, metavar="PATH", help="write a PNG of the run here")
    r.add_argument("--json", action="store_true", help="print the report as JSON (exit status 3 if it failed)")
    r.add_argument("--mode", choices=("sync", "async"), default=None,
                   help="MPC planners: sync (one thread, lag modeled; default) or async (planner thread, real time)")
    r.add_argument("--slowdown", type=float, default=None,
                   help="MPC planners: wall seconds per simulated second (default: the task's target, 1 = real time)")
    r.add_argument("--lag", type=float, default=None, metavar="SECONDS",
                   help="MPC planners, sync mode: fixed policy lag in simulated seconds (default: measured)")
    r.add_argument("--deterministic", action="store_true",
                   help="MPC planners, sync mode: a fixed lag calibrated once on this machine (cached) instead of "
                        "the measured one, so runs of a seed repeat exactly; the report gives the lag")
    r.add_argument("--push", action="append", default=None, metavar="T:BODY:FX,FY,FZ[:DURATION]",
                   help="MPC planners: push BODY at time T (s) with a world force in N for DURATION s "
                        "(default 0.1); repeatable")
    r.add_argument("--mass-scale", type=float, default=None,
                   help="MPC planners: model error, plant masses × this (planner keeps the nominal model)")
    r.add_argument("--friction-scale", type=float, default=None,
                   help="MPC planners: model error, plant friction × this")
    r.add_argument("--gain-scale", type=float, default=None,
                   help="MPC planners: model error, plant actuator forces × this")
    r.add_argument("--latency", type=float, default=None, metavar="SECONDS",
                   help="MPC planners, sync mode: extra delay before each plan is applied that the "
                        "planner is not told about")
    r.add_argument("--plant-contact", choices=("mujoco", "smooth"), default=None,
                   help="MPC planners: step the plant with MuJoCo's contacts (default) or the smooth "
                        "contact model of the iLQG paper")
    r.add_argument("--plant-eta", type=float, default=None,
                   help="with --plant-contact smooth: η of the plant's contacts (default 0.7, the paper's)")
    r.set_defaults(func=cmd_run)

    # --- gui subcommand (contactopt.gui): begin ---
    from .gui.cli import add_gui_parser  # the command imports viser only when it runs

    add_gui_parser(sub)
    # --- gui subcommand (contactopt.gui): end ---

    # --- serve subcommand and run --remote (contactopt.remote): begin ---
    from .remote.cli import add_arguments as _add_remote_arguments

    _add_remote_arguments(sub)  # `serve`, and run --remote/--token-file/--tls-ca (no grpc import here)
    # --- serve subcommand and run --remote (contactopt.remote): end ---

    # --- sweep subcommand (contactopt.sweep): begin ---
    from .sweep.cli import add_sweep_parser  # the command imports Ray only with --ray

    add_sweep_parser(sub)  # `sweep`, and bench --workers (bench tasks on the sweep engines)
    # --- sweep subcommand (contactopt.sweep): end ---
    from .optimize_cli import add_optimize_parser  # `optimize`: offline IDTO of a task

    add_optimize_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``contactopt`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    warnings = _capture_mujoco_warnings()
    _print_notices_on_one_line()
    try:
        status = int(args.func(args) or 0)
    except ContactoptError as exc:
        # The error already says what went wrong; MuJoCo's own warnings about it are noise.
        print(f"contactopt: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("contactopt: interrupted", file=sys.stderr)
        return 130
    except SystemError as exc:  # Ctrl-C inside a compiled kernel surfaces as SystemError
        if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            print("contactopt: interrupted", file=sys.stderr)
            return 130
        raise
    except BrokenPipeError:  # output piped into e.g. `head`, which closed early
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout at exit
        return 0
    for message in dict.fromkeys(warnings):
        print(f"contactopt: mujoco warning: {message}", file=sys.stderr)
    return status


def _print_notices_on_one_line() -> None:
    """Show the library's :class:`~contactopt.errors.ModelNotice` s (e.g. "RK4 switched to
    implicitfast in the planner's copy") as ``contactopt: notice: …``, one line each."""
    import warnings

    from .errors import ModelNotice

    show = warnings.showwarning

    def notice(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, ModelNotice):
            print(f"contactopt: notice: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = notice


def _capture_mujoco_warnings() -> list[str]:
    """Route MuJoCo's warnings (otherwise printed and appended to MUJOCO_LOG.TXT in the
    current directory) into a list that :func:`main` reports once, one line each."""
    import mujoco

    collected: list[str] = []
    mujoco.set_mju_user_warning(lambda msg: collected.append(" ".join(str(msg).split())))
    return collected


# --------------------------------------------------------------------------- commands


def cmd_models(args) -> int:
    """``contactopt models``: name, nq, nv, nu, description of each bundled model."""
    from .model import load_model
    from .models import BUNDLED_MODELS

    rows = []
    for info in BUNDLED_MODELS.values():
        m = load_model(info.name)
        rows.append({
            "name": info.name, "nq": m.nq, "nv": m.nv, "nu": m.nu,
            "timestep": m.opt.timestep, "description": info.description, "source": info.source,
            "path": str(info.path),
        })
    if args.json:
        print(json.dumps({"models": rows}, indent=2))
        return 0
    from .bench import format_table

    print(format_table(rows, [("name", "name", "{}"), ("nq", "nq", "{}"), ("nv", "nv", "{}"),
                              ("nu", "nu", "{}"), ("timestep", "h [s]", "{:g}"),
                              ("description", "  description", "  {}")]))
    return 0


def _comma_list(values: list[str]) -> list[str]:
    """The names of a repeatable, comma-separated option (``--tasks a,b --tasks c``), in order."""
    return [name.strip() for item in values for name in item.split(",") if name.strip()]


def cmd_warmup(args) -> int:
    """``contactopt warmup``: compile every kernel family (:func:`contactopt.warmup.warm_kernels`)
    and print the seconds each took."""
    from .warmup import warm_kernels

    families = None
    if args.family:
        families = _comma_list(args.family)

    def report(name: str, seconds: float) -> None:
        if not args.json:
            print(f"{name:8s} {seconds:7.1f} s", flush=True)

    if sys.stderr.isatty():
        from .warmup import KERNEL_FAMILIES

        names = families or list(KERNEL_FAMILIES)
        print(f"compiling {', '.join(names)} (minutes the first time on this machine, "
              "seconds when cached) ...", file=sys.stderr, flush=True)

    seconds = warm_kernels(families, jobs=args.jobs, report=report)
    if args.json:
        print(json.dumps({"families": [{"family": k, "seconds": v} for k, v in seconds.items()]}, indent=2))
    return 0


def cmd_simulate(args) -> int:
    """``contactopt simulate``: passive MuJoCo simulation with optional video, plot and JSON."""
    from .model import load_model, num_steps
    from .simulate import simulate

    model = load_model(args.model, timestep=args.timestep)
    num_steps(args.seconds, model.opt.timestep)  # validate the duration before opening outputs
    if args.fps <= 0:
        raise ParameterError(f"--fps must be positive, got {args.fps}")
    for flag, path in (("--video", args.video), ("--plot", args.plot)):
        if path is not None and not path.parent.exists():
            raise ParameterError(f"{flag}: directory {path.parent} does not exist")
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        raise ParameterError(f"--plot path must end in .png, got {args.plot}")
    if args.video is not None:
        from .render import gl_backend

        gl_backend()  # no usable OpenGL fails now, not after the simulation

    contact_model = None
    if args.kappa is not None:
        if args.contact != "convex":
            raise ParameterError("--kappa applies to --contact convex only")
        from .contact import ConvexContactModel

        contact_model = ConvexContactModel(kappa=args.kappa)
    if args.eta is not None:
        if args.contact != "smooth":
            raise ParameterError("--eta applies to --contact smooth only")
        from .contact import SmoothContactModel

        contact_model = SmoothContactModel(eta=args.eta)
    sim_options = dict(keyframe=args.keyframe, contact=args.contact, contact_model=contact_model)
    if args.video is None:
        result = simulate(model, args.seconds, **sim_options)
    else:
        from .render import OffscreenRenderer, VideoWriter

        if args.width <= 0 or args.height <= 0 or args.width % 2 or args.height % 2:
            raise ParameterError(f"--width and --height must be positive and even for H.264 video, "
                                 f"got {args.width}x{args.height}")
        from .simulate import frame_stride

        # Play back in real time: the writer's rate is the true sampling rate of the frames.
        video_fps = 1.0 / (frame_stride(model.opt.timestep, args.fps) * model.opt.timestep)
        with VideoWriter(args.video, fps=video_fps) as writer:
            with OffscreenRenderer(model, args.width, args.height, camera=args.camera) as renderer:
                result = simulate(model, args.seconds, **sim_options,
                                  frame_callback=lambda d: writer.append(renderer.render(d)),
                                  frame_rate=args.fps)
    if args.plot is not None:
        from .plots import plot_simulation

        plot_simulation(result, args.plot)
    summary = result.summary()
    summary["contact"] = args.contact
    summary.update({k: v for k, v in result.extra.items() if k.startswith("contact_")})
    summary["video"] = str(args.video) if args.video else None
    summary["plot"] = str(args.plot) if args.plot else None
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{summary['model']} ({args.contact} contact): {summary['steps']} steps of {summary['timestep'] * 1e3:g} ms "
              f"({summary['seconds']:g} s simulated in {summary['wall_time_s']:.2f} s, "
              f"{summary['realtime_factor']:.1f}x real time)")
        print(f"  energy {summary['energy_initial']:.3f} J -> {summary['energy_final']:.3f} J; "
              f"contacts at end: {summary['contacts_final']} (max {summary['contacts_max']}); "
              f"max normal force {summary['normal_force_max']:.1f} N")
        for key in ("video", "plot"):
            if summary[key]:
                extra = f" ({result.video_frames} frames)" if key == "video" else ""
                print(f"  wrote {summary[key]}{extra}")
    return 0


def cmd_bench(args) -> int:
    """``contactopt bench NAME``: run a registered benchmark."""
    from .bench import available_benchmarks, get_benchmark

    if args.name is None:
        for name, bench in sorted(available_benchmarks().items()):
            print(f"{name:12s} {bench.description}")
        return 0
    bench = get_benchmark(args.name)
    if not args.min_time > 0:
        raise ParameterError(f"--min-time must be positive, got {args.min_time}")
    if args.out is not None and not args.out.parent.exists():
        raise ParameterError(f"--out: directory {args.out.parent} does not exist")
    options = {}
    if args.plots is not None:
        if "plots" not in bench.options:
            raise ParameterError(f"benchmark {bench.name!r} writes no plots (--plots is not supported)")
        if not args.plots.is_dir():
            raise ParameterError(f"--plots: directory {args.plots} does not exist")
        options["plots"] = args.plots
    for name, doing in (("seeds", "runs no seeded tasks"), ("records", "records no dataset"),
                        ("tasks", "takes no task list"), ("planner", "takes no planner"),
                        ("load", "has no load condition"), ("deterministic", "has no lag to fix"),
                        ("lag", "has no lag to fix"), ("asynchronous", "has no async mode"),
                        ("repeats", "reports no timing ratio"),
                        ("horizon_sweep", "has no horizon sweep"), ("minutes", "has no soak length"),
                        ("soaks", "runs no soaks")):
        value = getattr(args, name)
        if value is None or value is False:
            continue
        if name not in bench.options:
            flag = {"asynchronous": "async"}.get(name, name).replace("_", "-")
            raise ParameterError(f"benchmark {bench.name!r} {doing} (--{flag} is not supported)")
        if name == "seeds":
            from .bench.tasks_bench import parse_seed_range

            seeds = parse_seed_range(value)
            if "workers" not in bench.options and not bench.seed_ranges:  # a count of seeds from 0
                if seeds.start != 0:
                    raise ParameterError(f"bench {bench.name} takes a count of seeds (--seeds N), got {value!r}")
                value = len(seeds)
            else:
                value = seeds
        elif name in ("tasks", "soaks"):
            value = _comma_list(value)
        elif name == "records" and value < 1:
            raise ParameterError(f"--{name} must be >= 1, got {value}")
        elif name == "repeats":
            from .bench.timing import check_repeats

            value = check_repeats(value)
        options[name] = value
    result = bench.run(args.model, min_time=args.min_time, **options)
    text = json.dumps(result, indent=2)
    if args.out is not None:
        from .render import atomic_output

        with atomic_output(args.out) as tmp:
            tmp.write_text(text + "\n")
    print(text if args.json else bench.table(result))
    return 0


def _is_task_file(text: str) -> bool:
    return text.endswith(".py") or os.sep in text or Path(text).is_file()


def _list_tasks() -> int:
    from .tasks import available_tasks

    rows = [("task", "model", "planners", "description")]
    rows += [(name, spec.model, "/".join(spec.planners), spec.description)
             for name, spec in sorted(available_tasks().items())]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(f"{c:{w}s}" for c, w in zip(r[:3], widths)) + "  " + r[3])
    no_form = sorted(name for name, spec in available_tasks().items() if spec.task_factory is None)
    print("\nplanners: the tuned runs of each task.  Every task" + (f" but {', '.join(no_form)}" if no_form else "")
          + " also has a planner-independent form that any planner runs (--planner P; --set and "
          "--save-trajectory apply).")
    print("A Python file that defines TASK = contactopt.Task(...) runs too: contactopt run FILE.py "
          "--planner ilqg|idto|gdd")
    return 0


def _check_run_args(args) -> None:
    from .mpc.task_runner import check_seed

    check_seed(args.seed)
    if args.seconds is not None and not (math.isfinite(args.seconds) and args.seconds > 0):
        raise ParameterError(f"--seconds must be a positive finite number, got {args.seconds}")
    for flag, path in (("--video", args.video), ("--plot", args.plot), ("--save-trajectory", args.save_trajectory)):
        if path is not None and not path.parent.exists():
            raise ParameterError(f"{flag}: directory {path.parent} does not exist")
    if args.fps <= 0 or not math.isfinite(args.fps):
        raise ParameterError(f"--fps must be positive, got {args.fps}")
    if args.video is not None and (args.width <= 0 or args.height <= 0 or args.width % 2 or args.height % 2):
        raise ParameterError(f"--width and --height must be positive and even for H.264 video, "
                             f"got {args.width}x{args.height}")
    if args.video is not None:
        from .render import gl_backend

        gl_backend()  # no usable OpenGL fails now, not after the run
    if args.slowdown is not None and not (math.isfinite(args.slowdown) and args.slowdown > 0):
        raise ParameterError(f"--slowdown must be a positive number, got {args.slowdown}")
    if args.lag is not None and not (math.isfinite(args.lag) and args.lag >= 0):
        raise ParameterError(f"--lag must be a number of seconds >= 0, got {args.lag}")
    if args.lag is not None and args.mode == "async":
        raise ParameterError("--lag applies to --mode sync (async mode measures the lag)")
    if args.deterministic and (args.lag is not None or args.mode == "async"):
        raise ParameterError("--deterministic fixes the sync-mode lag itself; it excludes --lag and --mode async")
    if args.plant_eta is not None:
        if args.plant_contact != "smooth":
            raise ParameterError("--plant-eta applies to --plant-contact smooth")
        if not (math.isfinite(args.plant_eta) and 0 < args.plant_eta <= 1):
            raise ParameterError(f"--plant-eta must be in (0, 1], got {args.plant_eta}")
    for flag, value in (("--mass-scale", args.mass_scale), ("--friction-scale", args.friction_scale),
                        ("--gain-scale", args.gain_scale)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ParameterError(f"{flag} must be a positive number, got {value}")
    if args.latency is not None and not (math.isfinite(args.latency) and args.latency >= 0):
        raise ParameterError(f"--latency must be a number of seconds >= 0, got {args.latency}")
    if args.latency and args.mode == "async":
        raise ParameterError("--latency applies to --mode sync (async runs have their real latency)")


def _parse_settings(items) -> dict:
    out = {}
    for text in items or ():
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"--set {text!r}: expected KEY=VALUE (--set help lists the keys)")
        out[key.strip()] = value.strip()
    return out


def load_options_file(path) -> dict:
    """The ``--set`` keys of a TOML file (None: none): top-level ``key = value`` pairs; a dotted
    key written bare (``weight.qpos = 10``, a TOML table) and quoted (``"weight.qpos" = 10``)
    mean the same key.  Values keep their TOML type (number, bool, string, array of numbers).

    Raises:
      ParameterError: a missing or unreadable file, or TOML syntax errors (with the line).
    """
    if path is None:
        return {}
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser as the tomli package
        import tomli as tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ParameterError(f"--options {path}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ParameterError(f"--options {path}: not valid TOML: {exc}") from None

    out: dict = {}

    def flatten(prefix: str, table: dict) -> None:
        for key, value in table.items():
            full = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict):
                flatten(full, value)
            else:
                out[full] = value

    flatten("", data)
    return out


def _print_report(report: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report, indent=2))
        return
    for key, value in report.items():
        if isinstance(value, float):
            value = f"{value:.4g}"
        elif isinstance(value, (list, dict)):
            continue  # time series: --json shows them
        print(f"{key:22s} {value}")


def cmd_run_file(args, task=None, default_planner: str | None = None) -> int:
    """``contactopt run FILE.py``: the ``TASK`` of a Python file (or ``task``) with any registered planner
    (without ``--planner``: ``default_planner``, else the task's own, :attr:`Task.default_planner`)."""
    from .mpc import registry
    from .mpc.task_runner import run_task, save_trajectory
    from .task import load_task_file

    if task is None:
        task = load_task_file(args.task)
    planner = args.planner or default_planner or task.default_planner
    registry.spec(planner)  # an unknown planner name lists the valid ones
    if "help" in (args.settings or ()):
        rows = registry.settings_help(planner, task)
        width = max(len(k) for k, _, _ in rows)
        print(f"--set keys of planner {planner!r} on task {task.name!r}:")
        for key, default, doc in rows:
            print(f"  {key:{width}s}  {default:>10s}  {doc}")
        return 0
    settings = {**load_options_file(args.options), **_parse_settings(args.settings)}
    _check_run_args(args)
    pushes = [_parse_push(text) for text in args.push or ()]
    common = dict(mode=args.mode or "sync", slowdown=args.slowdown or 1.0, mass_scale=args.mass_scale or 1.0,
                  friction_scale=args.friction_scale or 1.0, gain_scale=args.gain_scale or 1.0,
                  latency=args.latency or 0.0, settings=settings, plant_contact=args.plant_contact or "mujoco",
                  plant_eta=0.7 if args.plant_eta is None else args.plant_eta)
    lag, lag_note = args.lag, None
    if args.deterministic:
        from .mpc.calibration import task_fixed_lag

        lag, lag_note = task_fixed_lag(task, planner, args.seed, **common)
    run = run_task(task, planner, seed=args.seed, seconds=args.seconds, lag=lag, pushes=pushes, **common)
    report = run.report
    if lag_note is not None:
        report["lag_s"], report["lag_source"] = lag, lag_note
    if args.save_trajectory is not None:
        save_trajectory(run, args.save_trajectory)
        report["trajectory"] = str(args.save_trajectory)
    from .mpc.outputs import plot_mpc, write_video

    if args.video is not None:
        report["video_frames"] = write_video(run.plant, run.result, args.video, fps=args.fps, width=args.width,
                                             height=args.height, camera=args.camera)
        report["video"] = str(args.video)
    if args.plot is not None:
        plot_mpc(task.name, run.result, args.plot, metric_label="running cost")
        report["plot"] = str(args.plot)
    _print_report(report, args.json)
    return 0 if report.get("success", True) else 3


def cmd_run(args) -> int:
    """``contactopt run TASK --planner P``: a closed-loop run of a task; lists the tasks without one."""
    from .tasks import load_task

    if args.task is None:
        return _list_tasks()
    if _is_task_file(args.task):
        return cmd_run_file(args)
    spec = load_task(args.task)
    generic = spec.task_factory is not None and (
        (args.planner is not None and args.planner not in spec.runners) or args.settings or args.options
        or args.save_trajectory or args.plant_contact is not None)
    if generic:  # the scenario's planner-independent Task, with any registered planner
        return cmd_run_file(args, task=spec.task(), default_planner=spec.planners[0])
    if args.settings or args.options:
        raise ParameterError(f"--set and --options apply to task files and to tasks with a planner-independent form; "
                             f"{args.task!r} has fixed settings")
    if args.save_trajectory is not None:
        raise ParameterError(f"--save-trajectory applies to task files and to tasks with a planner-independent "
                             f"form; {args.task!r} has none")
    if args.plant_contact is not None:
        raise ParameterError(f"--plant-contact applies to task files and to tasks with a planner-independent "
                             f"form; {args.task!r} has none")
    runner = spec.runner(args.planner)
    _check_run_args(args)
    options = {k: v for k, v in (("mode", args.mode), ("slowdown", args.slowdown), ("lag", args.lag),
                                 ("mass_scale", args.mass_scale), ("friction_scale", args.friction_scale),
                                 ("gain_scale", args.gain_scale), ("latency", args.latency))
               if v is not None}
    if args.push:
        options["pushes"] = [_parse_push(text) for text in args.push]
    if options:
        import inspect

        accepted = inspect.signature(runner).parameters
        for key in options:
            if key not in accepted:
                key = {"pushes": "push"}.get(key, key).replace("_", "-")
                raise ParameterError(f"--{key} does not apply to the {args.planner or spec.planners[0]!r} "
                                     f"planner of {spec.name!r}")
    lag_note = None
    if args.deterministic:
        from .mpc.calibration import runner_fixed_lag

        lag_note = runner_fixed_lag(spec.name, args.planner or spec.planners[0], runner, options, args.seed)
    report = runner(seconds=args.seconds, seed=args.seed, video=args.video, plot=args.plot, **options)
    if lag_note is not None:
        report["lag_s"], report["lag_source"] = options.get("lag"), lag_note
    _print_report(report, args.json)
    return 0 if report.get("success", True) else 3


def _parse_push(text: str):
    """``T:BODY:FX,FY,FZ[:DURATION]`` → :class:`~contactopt.mpc.Push`."""
    from .mpc import Push

    parts = text.split(":")
    try:
        if len(parts) not in (3, 4):
            raise ValueError
        force = tuple(float(f) for f in parts[2].split(","))
        if len(force) != 3:
            raise ValueError
        t, duration = float(parts[0]), float(parts[3]) if len(parts) == 4 else 0.1
    except ValueError:
        raise ParameterError(f"--push {text!r}: expected T:BODY:FX,FY,FZ[:DURATION], e.g. 1.0:torso:0,300,0:0.1"
                             ) from None
    if not all(math.isfinite(v) for v in (t, duration, *force)) or t < 0 or duration <= 0:
        raise ParameterError(f"--push {text!r}: time must be >= 0, duration > 0, all finite")
    return Push(t, duration, parts[1], force)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
