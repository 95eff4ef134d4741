"""``contactopt optimize``: offline IDTO trajectory optimization of a task (:mod:`contactopt.offline`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .errors import ParameterError

__all__ = ["add_optimize_parser", "cmd_optimize"]


def add_optimize_parser(sub) -> None:
    """Add the ``optimize`` subcommand to the ``contactopt`` subparsers ``sub``."""
    o = sub.add_parser("optimize", help="offline IDTO trajectory optimization of a task (summary, JSON, video)")
    o.add_argument("task", metavar="TASK_OR_FILE", help="bundled task with an IDTO form, or a task file")
    o.add_argument("--backend", default="convex", metavar="convex|compliant|mujoco",
                   help="inverse dynamics of the problem (default convex: the convex invertible contact model)")
    o.add_argument("--continuation", action="store_true",
                   help="convex backend: κ-continuation from --kappa-start down to --kappa by --kappa-factor")
    o.add_argument("--kappa", type=float, default=0.1, help="convex backend: (final) κ (default 0.1, the paper's)")
    o.add_argument("--kappa-start", type=float, default=None,
                   help="continuation: first κ (default 10 × --kappa)")
    o.add_argument("--kappa-factor", type=float, default=0.3,
                   help="continuation: κ shrink factor per stage, in (0, 1) (default 0.3)")
    o.add_argument("--horizon", type=int, default=None, metavar="N", help="knots T (default: the task's)")
    o.add_argument("--iterations", type=int, default=None, metavar="N",
                   help="total solver iterations (default: the task's first-plan count)")
    o.add_argument("--workers", type=int, default=None, metavar="N",
                   help="one solve: threads differentiating time steps (default 1: timings per core); with "
                        "--seeds: solves at once, each single-threaded, on worker processes or Ray CPUs "
                        "(default: the CPU count)")
    o.add_argument("--seed", type=int, default=0, help="seed of the task's initial state (default 0)")
    o.add_argument("--seeds", default=None, metavar="A:B",
                   help="a dataset: one solve per initial state of seeds A..B-1 (or N for 0:N), one JSON row "
                        "each in --out (re-running with the same --out skips the solves already there)")
    o.add_argument("--out", type=Path, default=None, metavar="FILE.jsonl",
                   help="with --seeds: the rows (FILE.jsonl, or FILE.parquet with pyarrow)")
    o.add_argument("--save-trajectories", type=Path, default=None, metavar="DIR",
                   help="with --seeds: each solve's plan and its MuJoCo playback as DIR/TASK-BACKEND-seedN-ID.npz "
                        "(a row that ended in an error is kept: delete it from --out to solve that seed again)")
    o.add_argument("--ray", action="store_true",
                   help='with --seeds: run on Ray (pip install "contactopt[ray]"): a local instance, or --address')
    o.add_argument("--address", default=None, metavar="HOST:PORT",
                   help="with --ray: join the cluster whose head runs there (`ray start --head`)")
    o.add_argument("--video", type=Path, default=None, metavar="PATH",
                   help="write an MP4 of the plan played back in MuJoCo (see --playback)")
    o.add_argument("--playback", default="mujoco", metavar="mujoco|plan",
                   help="video: 'mujoco' (default) runs the plan open loop in the MuJoCo plant with the task's "
                        "tracking policy; 'plan' shows the planned configurations")
    o.add_argument("--camera", default="video", help="video camera name (default: 'video', else automatic)")
    o.add_argument("--width", type=int, default=640, help="video width in pixels (default 640)")
    o.add_argument("--height", type=int, default=480, help="video height in pixels (default 480)")
    o.add_argument("--fps", type=float, default=30.0, help="video frame rate (default 30)")
    o.add_argument("--json", action="store_true", help="print the report as JSON")
    o.set_defaults(func=cmd_optimize)


def _check(args) -> None:
    from .offline import BACKENDS

    if args.backend not in BACKENDS:
        raise ParameterError(f"--backend must be one of {', '.join(BACKENDS)}, got {args.backend!r}")
    for flag, value in (("--horizon", args.horizon), ("--iterations", args.iterations), ("--workers", args.workers)):
        if value is not None and value < 1:
            raise ParameterError(f"{flag} must be a positive integer, got {value}")
    if args.seed < 0:
        raise ParameterError(f"--seed must be >= 0, got {args.seed}")
    if args.continuation and args.backend != "convex":
        raise ParameterError(f"--continuation needs --backend convex (κ is the convex model's), got {args.backend!r}")
    for flag, value in (("--kappa", args.kappa), ("--kappa-start", args.kappa_start)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ParameterError(f"{flag} must be a positive number, got {value}")
    if not (0 < args.kappa_factor < 1):
        raise ParameterError(f"--kappa-factor must be in (0, 1), got {args.kappa_factor}")
    if args.seeds is None:
        for flag, value in (("--out", args.out), ("--save-trajectories", args.save_trajectories)):
            if value is not None:
                raise ParameterError(f"{flag} belongs to a dataset: add --seeds A:B")
        if args.ray or args.address is not None:
            raise ParameterError("--ray runs a dataset: add --seeds A:B")
    else:
        if args.out is None:
            raise ParameterError("--seeds needs --out FILE.jsonl (one row per solve)")
        if args.video is not None:
            raise ParameterError("--video renders one solve: with --seeds, use --save-trajectories DIR")
        if args.seed != 0:
            raise ParameterError("--seed picks one initial state: with --seeds A:B, give the range only")
    if args.playback not in ("mujoco", "plan"):
        raise ParameterError(f"--playback must be 'mujoco' or 'plan', got {args.playback!r}")
    if args.video is not None:
        if not args.video.parent.exists():
            raise ParameterError(f"--video: directory {args.video.parent} does not exist")
        if args.video.suffix.lower() != ".mp4":
            raise ParameterError(f"--video must end in .mp4, got {args.video}")
        if args.width <= 0 or args.height <= 0 or args.width % 2 or args.height % 2:
            raise ParameterError(f"--width and --height must be positive and even, got {args.width}x{args.height}")
        if not (math.isfinite(args.fps) and args.fps > 0):
            raise ParameterError(f"--fps must be positive, got {args.fps}")


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def _print(report: dict) -> None:
    for key, value in report.items():
        if isinstance(value, dict) or key == "stages":
            continue
        print(f"{key:26s} {_fmt(value)}")
    br = report.get("newton_step_breakdown_ms") or {}
    if br:
        print(f"{'newton step (median, ms)':26s} " + "  ".join(f"{k} {v:.1f}" for k, v in br.items()))
    if report.get("stages"):
        print("\nstage  kappa      iters  start cost    end cost      wall [s]  status")
        for i, st in enumerate(report["stages"]):
            print(f"{i:5d}  {st['kappa']:<9.4g}  {st['iterations']:5d}  {st['start_cost']:<12.5g}  "
                  f"{st['cost']:<12.5g}  {st['wall_time_s']:8.2f}  {st['status']}")


def cmd_optimize(args) -> int:
    """``contactopt optimize TASK_OR_FILE``: build, solve, report (and optionally render) one offline plan."""
    from .offline import (
        build_offline_problem,
        optimize_offline,
        plan_states,
        playback_in_mujoco,
        report,
        root_displacement,
        timed,
        write_states_video,
    )
    from .solvers.idto import KappaSchedule

    _check(args)
    schedule = None
    if args.continuation:
        start = 10.0 * args.kappa if args.kappa_start is None else args.kappa_start
        schedule = KappaSchedule(start, args.kappa, args.kappa_factor)
    if args.seeds is not None:
        return _cmd_optimize_many(args, schedule)
    op = build_offline_problem(args.task, backend=args.backend, horizon=args.horizon, kappa=args.kappa,
                               workers=args.workers or 1, seed=args.seed)
    try:
        (result, stages), wall = timed(optimize_offline, op, iterations=args.iterations, continuation=schedule)
    finally:
        op.problem.close()
    out = report(op, result, stages, backend=args.backend, wall_time=wall)
    ts, qs, _ = playback_in_mujoco(op, result)
    out["mujoco_playback_seconds"] = float(ts[-1])
    out["mujoco_root_displacement_m"] = root_displacement(op.plant, qs)
    if args.video is not None:
        if args.playback == "plan":
            ts, qs = plan_states(op.plant, result.q, op.problem.h, args.fps)
        out["video_frames"] = write_states_video(op.plant, ts, qs, args.video, fps=args.fps, width=args.width,
                                                 height=args.height, camera=args.camera)
        out["video"] = str(args.video)
        out["video_playback"] = args.playback
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _print(out)
    return 0


def _cmd_optimize_many(args, schedule) -> int:
    """``contactopt optimize TASK --seeds A:B --out FILE``: one offline solve per seed on the sweep engine."""
    import os

    import numpy as np

    from .bench.tasks_bench import parse_seed_range
    from .offline import optimize_many, plan_offline_units
    from .sweep import SweepOutput

    output = SweepOutput(args.out)  # a missing folder or parquet without pyarrow: nothing runs, nothing written
    units = plan_offline_units(args.task, parse_seed_range(args.seeds), backend=args.backend,
                               horizon=args.horizon, iterations=args.iterations, kappa=args.kappa,
                               continuation=schedule, trajectories=args.save_trajectories)
    workers = args.workers or os.cpu_count() or 1
    result = optimize_many(units, output, workers=workers, ray=args.ray, address=args.address)
    rows = result["rows"]
    ok = [r for r in rows if r.get("success")]
    errors: dict[str, int] = {}
    for r in rows:
        if r.get("error"):
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    costs = [r["cost"] for r in ok]
    summary = {"task": args.task, "backend": args.backend, "solves": len(rows), "finite": len(ok),
               "converged": sum(bool(r.get("converged")) for r in rows),
               "cost_median": float(np.median(costs)) if costs else None,
               "iterations_median": float(np.median([r["iterations"] for r in ok])) if ok else None,
               "solve_seconds_median": float(np.median([r["solve_seconds"] for r in ok])) if ok else None,
               "errors": errors, "out": str(args.out),
               **{k: v for k, v in result.items() if k != "rows"}}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for key, value in summary.items():
        if key in ("errors", "loadavg_1min"):
            continue
        print(f"{key:26s} {_fmt(value)}")
    for kind, n in sorted(errors.items()):
        print(f"{'error':26s} {n} × {kind}")
    return 0
