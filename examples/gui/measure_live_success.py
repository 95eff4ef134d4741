"""Does a task keep its headless success rate when run live with the GUI server drawing it?

Runs the task's seeds headless (``run_task(..., mode="async")``, real time at the slowdown),
then the same seeds one after the other in one :class:`~contactopt.mpc.live.LiveRun` with the
GUI server attached and a client receiving its scene
(:func:`contactopt.gui.probe.receiving_client`), and prints one JSON line: the outcome per seed
both ways and the scene updates/s the server sent.

    python examples/gui/measure_live_success.py [--task humanoid-getup] [--seeds 0:8] [--slowdown 2]
"""

from __future__ import annotations

import argparse
import json
import time

from contactopt.gui.app import GuiApp
from contactopt.gui.probe import receiving_client
from contactopt.mpc.live import LiveRun
from contactopt.mpc.task_runner import run_task
from contactopt.tasks import load_task


def live_success(run: LiveRun, seed: int, duration: float, wall_limit: float) -> bool:
    """Reset ``run`` to ``seed``; True once its success test has held, False when ``duration``
    simulated seconds or ``wall_limit`` wall seconds pass first."""
    run.reset(seed)
    end = time.monotonic() + wall_limit
    while time.monotonic() < end:
        st = run.telemetry()["status"]
        if st["error"] is not None:
            raise RuntimeError(st["error"])
        if st["succeeded_at"] is not None:
            return True
        if st["time"] >= duration:
            return False
        time.sleep(0.05)
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="humanoid-getup")
    ap.add_argument("--planner", default="ilqg")
    ap.add_argument("--seeds", default="0:8", metavar="A:B")
    ap.add_argument("--slowdown", type=float, default=2.0)
    args = ap.parse_args()
    a, b = (int(x) for x in args.seeds.split(":"))
    seeds = list(range(a, b))
    task = load_task(args.task).task()
    t0 = time.monotonic()
    headless = [bool(run_task(task, args.planner, seed=s, mode="async", slowdown=args.slowdown,
                              stop_on_success=True).result.success) for s in seeds]
    t1 = time.monotonic()
    app = GuiApp(LiveRun(task, args.planner, seed=seeds[0], slowdown=args.slowdown), port=0).start()
    client = receiving_client(app.url)
    try:
        end = time.monotonic() + 30
        while not app.server.get_clients() and time.monotonic() < end:
            time.sleep(0.1)
        if not app.server.get_clients():
            raise SystemExit("the receiving client did not connect within 30 s")
        live = [live_success(app.run, s, task.duration, task.duration * args.slowdown * 1.5) for s in seeds]
        rate = app.scene_rate()
    finally:
        client.kill()
        client.wait()
        app.close()
    print(json.dumps({"task": args.task, "planner": args.planner, "seeds": args.seeds, "slowdown": args.slowdown,
                      "headless_async": f"{sum(headless)}/{len(seeds)}", "live_with_gui": f"{sum(live)}/{len(seeds)}",
                      "headless": headless, "live": live, "scene_updates_per_s": round(rate, 1),
                      "wall_s": {"headless": round(t1 - t0, 1), "live": round(time.monotonic() - t1, 1)}}))


if __name__ == "__main__":
    main()
