"""Progress bars that appear on a terminal and stay silent when output is piped."""

from __future__ import annotations

import contextlib
import sys

__all__ = ["progress_bar", "interactive"]


def interactive() -> bool:
    """True when stderr is attached to a terminal (and not running under CI)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _NullBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass


@contextlib.contextmanager
def progress_bar(total: int, desc: str = "", unit: str = "it", enable: bool | None = None):
    """Yield a tqdm bar writing to stderr, or a no-op bar.

    Args:
      total: number of updates expected.
      desc: label.
      unit: unit name shown by tqdm.
      enable: force on/off; None means "only when stderr is a terminal".
    """
    if enable is None:
        enable = interactive()
    if not enable:
        yield _NullBar()
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True) as bar:
        yield bar
