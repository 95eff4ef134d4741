"""Progress output: tqdm on a terminal, plain log lines for long jobs when piped, else silence."""

from __future__ import annotations

import io

from contactopt import progress
from contactopt.progress import LogLines, progress_bar


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_log_lines_at_most_every_interval_and_at_the_end():
    clock, out = _Clock(), io.StringIO()
    bar = LogLines(10, "bench tasks", "run", interval=30.0, stream=out, clock=clock)
    for _ in range(4):
        clock.now += 10.0
        bar.update()
    # 40 s, 4 runs done: one line at the first update 30 s or more after the start
    lines = out.getvalue().splitlines()
    assert lines == ["bench tasks: 3/10 runs, 0:30 elapsed, about 1:10 left"]
    bar.set_postfix_str("acrobot/ilqg")
    for _ in range(6):
        clock.now += 100.0
        bar.update()
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[-1] == "bench tasks: 10/10 runs, 10:40 elapsed (acrobot/ilqg)"
    assert len(lines) == 1 + 5 + 1  # every later update was 100 s after the last line, but not the last one


def test_piped_long_jobs_log_and_short_ones_stay_silent(monkeypatch, capsys):
    monkeypatch.setattr(progress, "interactive", lambda: False)
    with progress_bar(3, desc="bench x", unit="run", piped_lines=True, log_interval=1e9) as bar:
        for _ in range(3):
            bar.update()
    assert capsys.readouterr().err.strip().startswith("bench x: 3/3 runs, 0:00 elapsed")
    with progress_bar(3, desc="simulate", unit="step") as bar:
        bar.update(3)
    assert capsys.readouterr().err == ""
    with progress_bar(3, desc="bench x", unit="run", enable=False, piped_lines=True) as bar:
        bar.update(3)
    assert capsys.readouterr().err == ""  # an explicit "off" wins


def test_a_closed_stream_is_not_an_error():
    out = io.StringIO()
    bar = LogLines(2, "sweep", "run", stream=out)
    out.close()
    bar.update()
    bar.close()
