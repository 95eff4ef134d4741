"""The repository's own contract: CI runs exactly the README's test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readmes_test_command_verbatim():
    """The README's test command (the ``pip install -e ".[test]" && …`` line of its set-up
    section) is a line of ``.ci/run``, and it runs both passes: the parallel one without the
    ``realtime`` tests and the ``realtime`` one alone."""
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r'^pip install -e "\.\[test\]" && .+$', readme, flags=re.M)
    assert len(commands) == 1, commands
    command = commands[0]
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()
    assert '-m "not realtime"' in command and command.endswith("python -m pytest -q -m realtime")


def test_an_unmarked_wall_clock_run_fails_and_a_marked_one_passes(pytester):
    """The conftest guard: a test that builds async or measured-lag ``MPCSettings`` without
    ``@pytest.mark.realtime`` fails naming the marker; with it, or with a fixed lag, it passes."""
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    realtime: wall clock\n")
    pytester.makepyfile(test_guarded="""
        import pytest
        from contactopt.mpc import MPCSettings

        def test_unmarked_async():
            MPCSettings(duration=1.0, mode="async")

        def test_unmarked_measured():
            MPCSettings(duration=1.0)

        def test_unmarked_fixed_lag():
            MPCSettings(duration=1.0, lag=0.02)

        @pytest.mark.realtime
        def test_marked_async():
            MPCSettings(duration=1.0, mode="async")
    """)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*test_unmarked_async builds MPCSettings(mode='async'*realtime*"])
