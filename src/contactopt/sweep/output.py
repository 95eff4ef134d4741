"""The output file of a sweep: one row per unit, resumable, each unit exactly once.

``FILE.jsonl`` (always available): one JSON object per line.  While the sweep runs, each finished
unit's row is appended and ``fsync`` ed, so an interruption (Ctrl-C, a killed driver) loses at
most the units in flight.  Reading deduplicates by ``id`` (the last row of an id wins) and skips
a torn last line.  When the sweep ends (also on Ctrl-C) the file is rewritten atomically (a
temporary file renamed over it): the sweep's units in sweep order, then any rows of other
sweeps that were already in the file, each id once.

``FILE.parquet`` (needs ``pyarrow``): the rows are journaled to ``FILE.parquet.journal.jsonl``
the same way, and the table is written atomically at the end (the journal is then removed).
The ``grid`` column holds each row's grid values as a JSON string.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import ContactoptError, ParameterError

__all__ = ["SweepOutput", "read_rows"]


def _read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSON-lines file (a torn or blank line is skipped)."""
    rows = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return rows
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by an interruption
        if isinstance(row, dict) and "id" in row:
            rows.append(row)
    return rows


def _dedup(rows) -> dict[str, dict]:
    """``id → row`` (the last row of an id wins), in order of first appearance."""
    out: dict[str, dict] = {}
    for row in rows:
        out[row["id"]] = row
    return out


def _import_pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ParameterError("--out FILE.parquet needs pyarrow (pip install pyarrow); FILE.jsonl needs nothing"
                             ) from None
    return pyarrow


def read_rows(path) -> list[dict]:
    """The rows of a sweep output (``.jsonl`` or ``.parquet``, with its journal), each id once.

    Raises:
      ParameterError: a parquet file without pyarrow.
    """
    path = Path(path)
    rows: list[dict] = []
    if path.suffix == ".parquet":
        if path.exists():
            pa = _import_pyarrow()
            for row in pa.parquet.read_table(path).to_pylist():
                if isinstance(row.get("grid"), str):
                    row["grid"] = json.loads(row["grid"])
                rows.append(row)
        rows += _read_jsonl(path.with_name(path.name + ".journal.jsonl"))
    else:
        rows = _read_jsonl(path)
    return list(_dedup(rows).values())


class SweepOutput:
    """The output file of one sweep.

    Args:
      path: ``FILE.jsonl`` or ``FILE.parquet``; its folder must exist.

    Raises:
      ParameterError: a missing folder, another suffix, or parquet without pyarrow (checked
        here, before anything is written).
    """

    def __init__(self, path):
        self.path = Path(path)
        if self.path.suffix not in (".jsonl", ".parquet"):
            raise ParameterError(f"--out {path}: expected FILE.jsonl or FILE.parquet")
        if not self.path.parent.is_dir():
            raise ParameterError(f"--out: directory {self.path.parent} does not exist")
        if self.path.is_dir():
            raise ParameterError(f"--out {path} is a directory")
        if self.path.suffix == ".parquet":
            _import_pyarrow()
            self.journal = self.path.with_name(self.path.name + ".journal.jsonl")
        else:
            self.journal = self.path
        self._fh = None

    def existing(self) -> dict[str, dict]:
        """``id → row`` already in the output (from an earlier, possibly interrupted, run)."""
        return _dedup(read_rows(self.path))

    def append(self, row: dict) -> None:
        """Append one finished unit's row and flush it to disk (``fsync``)."""
        if self._fh is None:
            self._fh = open(self.journal, "a", encoding="utf-8")  # noqa: SIM115 - open until finalize
            if self._fh.tell() > 0:  # a torn last line from an interruption: start on a new line
                with open(self.journal, "rb") as fh:
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        self._fh.write("\n")
        self._fh.write(json.dumps(row, allow_nan=True) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def finalize(self, order: list[str]) -> list[dict]:
        """Rewrite the output atomically: rows of ``order`` (unit ids) first in that order, then any
        other rows already there; each id once.  Returns the rows written."""
        self.close()
        rows = _dedup(read_rows(self.path))
        ordered = [rows.pop(i) for i in order if i in rows] + list(rows.values())
        if not ordered and not self.path.exists():
            return ordered
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            if self.path.suffix == ".parquet":
                pa = _import_pyarrow()
                # every key of every row (from_pylist takes the columns of the first row only: an
                # error row or a `lost` flag further down would be dropped)
                keys = list(dict.fromkeys(k for r in ordered for k in r))
                table = pa.Table.from_pylist([{**{k: r.get(k) for k in keys}, "grid": json.dumps(r.get("grid", {}))}
                                              for r in ordered])
                pa.parquet.write_table(table, tmp)
            else:
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.writelines(json.dumps(row, allow_nan=True) + "\n" for row in ordered)
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            raise ContactoptError(f"--out {self.path}: cannot write it ({exc.strerror or exc})") from None
        finally:
            if tmp.exists():
                tmp.unlink()
        if self.journal != self.path and self.journal.exists():
            self.journal.unlink()
        return ordered

    def close(self) -> None:
        """Close the append handle (rows appended so far stay)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
