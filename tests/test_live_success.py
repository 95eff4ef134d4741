"""The live loop controls the robot: the acrobot through ``LiveRun`` in real time with the GUI
server attached and a client receiving its scene (:func:`contactopt.gui.probe.receiving_client`:
the server sends nothing to nobody) succeeds on at least half as many seeds as headless
asynchronous MPC (``run_task(..., mode="async")``) on seeds 0-5.

Half, not "the same less one": both runs are real time on a shared 2-core machine and the live
one is measurably worse there (docs/experiments/live-gui-acrobot.md).  It catches a live loop
that does not control the robot (plans not applied, a stalled plant or planner, an error) or a
GUI that takes the CPU."""

from __future__ import annotations

import time

import pytest

from contactopt.mpc.live import LiveRun
from contactopt.mpc.task_runner import run_task

SEEDS = tuple(range(6))

pytestmark = [pytest.mark.slow, pytest.mark.realtime]


def _live_success(app, seed: int, duration: float, wall_limit: float) -> bool:
    """The example's :func:`live_success` (examples/gui/measure_live_success.py) on the app's run."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "gui" / "measure_live_success.py"
    spec = importlib.util.spec_from_file_location("measure_live_success", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.live_success(app.run, seed, duration, wall_limit)


def test_acrobot_live_with_gui_keeps_the_headless_success_rate(capsys):
    pytest.importorskip("viser")
    from contactopt.gui.app import GuiApp
    from contactopt.gui.probe import receiving_client
    from contactopt.tasks import load_task

    task = load_task("acrobot").task()
    start = time.monotonic()
    headless = sum(bool(run_task(task, "ilqg", seed=s, mode="async", stop_on_success=True).result.success)
                   for s in SEEDS)
    t_headless = time.monotonic() - start
    app = GuiApp(LiveRun(task, "ilqg", seed=SEEDS[0], slowdown=1.0), port=0).start()
    client = receiving_client(app.url)
    try:
        end = time.monotonic() + 30
        while not app.server.get_clients() and time.monotonic() < end:
            time.sleep(0.1)
        assert app.server.get_clients(), "the receiving client did not connect"
        live = [_live_success(app, s, task.duration, wall_limit=task.duration * 1.5) for s in SEEDS]
        rate = app.scene_rate()
    finally:
        client.kill()
        client.wait()
        app.close()
    with capsys.disabled():
        print(f"\nacrobot ilqg seeds {SEEDS}: headless async {headless}/{len(SEEDS)} ({t_headless:.0f} s), "
              f"live with GUI {sum(live)}/{len(SEEDS)} {live} ({time.monotonic() - start - t_headless:.0f} s, "
              f"scene {rate:.0f} Hz)")
    assert 2 * sum(live) >= headless, f"live {sum(live)}/{len(SEEDS)} against headless {headless}"
    assert rate >= 0.5 * GuiApp.DEFAULT_SCENE_HZ, f"scene update rate {rate:.1f}/s: the scene was hardly drawn"
