"""Measure the GUI's cost on the planner's update time and its scene update rate.

Runs a task live four ways, one after the other, each for ``--seconds`` wall seconds after a
warm-up: the plant + planner alone (:class:`~contactopt.mpc.live.LiveRun`), with the GUI server
and no browser, with the GUI server and a websocket client in another process that receives
every message and draws nothing (the server's own cost, as with a browser on another machine),
and with the GUI server and a headless Chromium on this machine (which also draws the scene
with software WebGL on the same cores).  Prints the median planner update time [ms] over the
window and the scene updates/s sent by the server.

    python examples/gui/measure_overhead.py [--task humanoid-getup] [--slowdown 2] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from contactopt.gui.app import GuiApp
from contactopt.gui.probe import receiving_client
from contactopt.mpc.live import LiveRun
from contactopt.tasks import load_task

ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def window_stats(run: LiveRun, t_from: float, app: GuiApp | None) -> dict:
    upd = run.telemetry()["updates"]
    ms = upd.get("update_ms", np.zeros(0))
    t = upd.get("t", np.zeros(0))
    ok = np.isfinite(ms) & (t >= t_from)
    return {"update_ms_median": round(float(np.median(ms[ok])), 2) if ok.any() else None,
            "updates": int(ok.sum()),
            "scene_updates_per_s": None if app is None else round(app.scene_rate(), 1)}


def measure(task, mode: str, args) -> dict:
    run = LiveRun(task, seed=args.seed, slowdown=args.slowdown)
    app = None
    browser = pw = listener = None
    if mode == "live only":
        run.start()
    else:
        app = GuiApp(run, port=0, scene_hz=args.scene_hz).start()
        if mode == "gui + websocket client":
            listener = receiving_client(app.url)
        if mode == "gui + browser":
            from playwright.sync_api import sync_playwright

            pw = sync_playwright().start()
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(app.url)
    try:
        time.sleep(args.warmup)
        t_from = run.state()[0]
        rates = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            time.sleep(1.0)
            if app is not None:
                rates.append(app.scene_rate())
        out = window_stats(run, t_from, app)
        if rates:
            out["scene_updates_per_s"] = round(float(np.median(rates)), 1)
        if app is not None:
            out["clients"] = len(app.server.get_clients())
        return out
    finally:
        if listener is not None:
            listener.kill()
            listener.wait()
        if browser is not None:
            browser.close()
            pw.stop()
        if app is not None:
            app.close()
        else:
            run.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="humanoid-getup")
    ap.add_argument("--slowdown", type=float, default=2.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scene-hz", type=float, default=GuiApp.DEFAULT_SCENE_HZ, help="target scene updates/s")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--modes", default=None, help="comma-separated subset of the modes")
    args = ap.parse_args()
    task = load_task(args.task).task()
    modes = ["live only", "gui, no client", "gui + websocket client"] + ([] if args.no_browser else ["gui + browser"])
    if args.modes:
        modes = [m for m in modes if m in args.modes.split(",")]
    for mode in modes:
        print(json.dumps({"mode": mode, "task": args.task, "slowdown": args.slowdown, **measure(task, mode, args)}),
              flush=True)


if __name__ == "__main__":
    main()
