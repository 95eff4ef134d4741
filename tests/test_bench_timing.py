"""Paired timing: interleaved blocks, per-pair ratios, their median and spread."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from contactopt.bench.timing import Paired, check_repeats, paired_blocks, timed_calls
from contactopt.errors import ParameterError


def test_blocks_interleave_and_ratios_pair_up():
    calls = []
    times_a = iter([9.0, 2.0, 4.0, 6.0, 8.0, 10.0])  # the first is the warm-up pair
    times_b = iter([9.0, 1.0, 2.0, 3.0, 4.0, 5.0])

    def a():
        calls.append("a")
        return next(times_a)

    def b():
        calls.append("b")
        return next(times_b)

    pair = paired_blocks(a, b, repeats=5)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]
    assert pair.ratios == (2.0, 2.0, 2.0, 2.0, 2.0)  # each block paired with its neighbour
    assert pair.median == 2.0 and pair.iqr == (2.0, 2.0) and pair.repeats == 5
    row = pair.row()
    assert row["ratio_median"] == 2.0 and row["ratio_iqr"] == [2.0, 2.0] and row["repeats"] == 5


def test_spread_is_the_interquartile_range_of_the_pairs():
    p = Paired(a=(1.0,) * 5, b=(1.0,) * 5, ratios=(0.8, 0.9, 1.0, 1.1, 1.2))
    assert p.median == 1.0 and p.iqr == pytest.approx((0.9, 1.1))
    assert p.text() == "1.00 [0.90–1.10]"


def test_repeats_below_five_are_refused():
    for bad in (4, 0, -1, 2.5, True, "7"):
        with pytest.raises(ParameterError, match="--repeats must be an integer >= 5"):
            check_repeats(bad)
    assert check_repeats(5) == 5


def test_timed_calls_turns_the_collector_back_on():
    import gc

    assert gc.isenabled()
    assert timed_calls(lambda: gc.isenabled() and pytest.fail("gc on inside a timed block"), 3) >= 0
    assert gc.isenabled()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "contactopt", *args], capture_output=True, text=True,
                          timeout=300)


def test_bench_noise_reports_a_self_ratio_with_its_spread():
    out = _cli("bench", "noise", "--json", "--repeats", "5", "--min-time", "0.08")
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)["rows"][0]
    assert row["repeats"] == 5 and row["step_us"] > 0
    q25, q75 = row["ratio_iqr"]
    assert q25 <= row["ratio_median"] <= q75


def test_repeats_flag_errors_are_one_line():
    out = _cli("bench", "noise", "--repeats", "3")
    assert out.returncode == 1 and "--repeats must be an integer >= 5" in out.stderr
    out = _cli("bench", "tasks", "--repeats", "7", "--tasks", "spinner", "--seeds", "0:1")
    assert out.returncode == 1 and "reports no timing ratio" in out.stderr
