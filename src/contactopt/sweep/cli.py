"""``contactopt sweep``: many closed-loop runs (seeds × grid points) on a process pool or Ray.

Also adds ``--workers`` to ``contactopt bench`` (``bench tasks`` runs its units on the sweep
engines).  Nothing here imports Ray, numpy or MuJoCo until a command runs.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..errors import ParameterError

__all__ = ["add_sweep_parser", "cmd_sweep"]


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return n


def add_sweep_parser(sub) -> None:
    """Add the ``sweep`` subcommand to ``sub`` (argparse subparsers) and ``--workers`` to ``bench``."""
    s = sub.add_parser("sweep", help="many closed-loop runs (seeds × grid of --set keys) on a process pool or Ray",
                       description="Run TASK_OR_FILE with a planner once per seed and grid point, on local worker "
                                   "processes or a Ray cluster, one JSON row per run in --out (re-running with the "
                                   "same --out skips the runs already there).")
    s.add_argument("task", metavar="TASK_OR_FILE", help="bundled task name, or a Python task file")
    s.add_argument("--planner", default=None,
                   help="planner (default: the task's first; ilqg for a task file without "
                        "planner_options)")
    s.add_argument("--seeds", required=True, metavar="A:B", help="seeds A..B-1 (or N for 0:N)")
    s.add_argument("--grid", action="append", default=None, metavar="KEY=V1,V2,...",
                   help="a grid axis over a --set key of run, e.g. horizon=0.3,0.5 or weight.qpos=1,10 "
                        "(repeatable: the grid is their product)")
    s.add_argument("--seconds", type=float, default=None, help="simulated seconds per run (default: the task's)")
    s.add_argument("--lag", type=float, default=None, metavar="SECONDS",
                   help="fixed sync-mode policy lag in simulated seconds (default: measured; a fixed lag makes "
                        "runs repeat exactly)")
    s.add_argument("--stop-on-success", action="store_true",
                   help="end each run once its success test has held (same outcome, less time)")
    s.add_argument("--workers", type=_workers, default=None,
                   help="worker processes (default: the CPU count); with --ray: CPUs of the local Ray instance")
    s.add_argument("--ray", action="store_true",
                   help='run on Ray (pip install "contactopt[ray]"): a local instance, or --address')
    s.add_argument("--address", default=None, metavar="HOST:PORT",
                   help="with --ray: join the cluster whose head runs there (`ray start --head`)")
    s.add_argument("--max-retries", type=int, default=3, help="retries of a unit whose worker died (default 3)")
    s.add_argument("--out", type=Path, required=True, metavar="FILE.jsonl",
                   help="one row per run (FILE.jsonl, or FILE.parquet with pyarrow); existing rows are kept "
                        "and their runs skipped")
    s.add_argument("--save-trajectories", type=Path, default=None, metavar="DIR",
                   help="write each run's trajectory (the npz of run --save-trajectory) as DIR/ID.npz")
    s.add_argument("--plots", type=Path, default=None, metavar="DIR",
                   help="write DIR/sweep_success.png: success rate against each grid axis")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.set_defaults(func=cmd_sweep)

    bench = sub.choices.get("bench")
    if bench is not None:
        bench.add_argument("--workers", type=_workers, default=None,
                           help="bench tasks, robustness, smooth-contact: run the units on N worker processes "
                                "(default 1: serially here)")
        inner = bench.get_default("func")

        def cmd_bench_workers(args, _inner=inner) -> int:
            """``contactopt bench`` with ``--workers`` handed to a benchmark that runs units on the sweep
            engine (``"workers"`` in its options)."""
            workers = getattr(args, "workers", None)
            if workers is None:
                return _inner(args)
            from ..bench import get_benchmark

            if "workers" not in get_benchmark(args.name).options:
                raise ParameterError(f"benchmark {args.name!r} runs no units in parallel (--workers is not supported)")
            from ..bench import tasks_bench

            with tasks_bench.using_workers(workers):
                return _inner(args)

        bench.set_defaults(func=cmd_bench_workers)


def cmd_sweep(args) -> int:
    """``contactopt sweep``: check everything, then run the units not yet in ``--out``."""
    from ..bench.tasks_bench import parse_seed_range
    from .engines import make_engine
    from .output import SweepOutput
    from .runner import plot_success, run_sweep, summarize, summary_table
    from .units import parse_grid, plan_sweep

    if args.max_retries < 0:
        raise ParameterError(f"--max-retries must be >= 0, got {args.max_retries}")
    if args.plots is not None and not args.plots.is_dir():
        raise ParameterError(f"--plots: directory {args.plots} does not exist")
    if args.address is not None and not args.ray:
        raise ParameterError("--address joins a Ray cluster: add --ray")
    output = SweepOutput(args.out)  # a missing folder or parquet without pyarrow: nothing written
    plan = plan_sweep(args.task, planner=args.planner, seeds=parse_seed_range(args.seeds),
                      grid=parse_grid(args.grid), seconds=args.seconds, lag=args.lag,
                      stop_on_success=args.stop_on_success, trajectories=args.save_trajectories)
    workers = args.workers or os.cpu_count() or 1
    with make_engine(workers, ray=args.ray, address=args.address, max_retries=args.max_retries) as engine:
        result = run_sweep(plan, output, engine)
    summary = summarize(result["rows"], plan.axes)
    plot = None
    if args.plots is not None:
        plot = args.plots / "sweep_success.png"
        plot_success(result["rows"], plan.axes, plot)
    info = {k: v for k, v in result.items() if k != "rows"}
    info.update({"out": str(args.out), "units": len(plan.units), "task": plan.task, "planner": plan.planner,
                 "grid": {k: list(v) for k, v in plan.axes}, "summary": summary,
                 "plot": None if plot is None else str(plot)})
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(summary_table(summary, plan.axes))
    la = result["loadavg_1min"]
    print(f"\n{len(result['rows'])} rows in {args.out} (ran {result['ran']}, skipped {result['skipped']} already "
          f"there) in {result['wall_s']:.1f} s on {result['engine']} × {result['workers']} workers; "
          f"1-min load average {la['start']} → {la['end']}")
    if plot is not None:
        print(f"wrote {plot}")
    return 0
