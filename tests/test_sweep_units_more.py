"""Users of the sweep engine beyond ``contactopt sweep``: GDD dataset recording on worker processes."""

import json

import numpy as np
import pytest

from contactopt.errors import ParameterError
from contactopt.solvers.gdd.dataset import (
    RECORD_FIELDS,
    GDDDataset,
    SessionUnit,
    main,
    record,
    run_session_unit,
)


def test_dataset_recorded_on_two_workers_equals_the_serial_one(tmp_path):
    """Three hand sessions (seeds 4, 5, 6; the last one cut) recorded in batches on a process pool
    (seeds 4 and 5 at once, then 6 alone) and one after the other here: the same dataset, field by
    field."""
    kw = {"seconds": 0.65, "seed": 4, "progress": False}
    serial = record("hand", 800, **kw)
    pooled = record("hand", 800, tmp_path / "pooled.npz", workers=2, **kw)
    assert len(serial) == len(pooled) == 800 and serial.model == pooled.model
    assert serial.specs == pooled.specs and len(serial.specs) == 3
    assert set(serial.arrays) == set(pooled.arrays) == {"session", *RECORD_FIELDS}
    for key in serial.arrays:
        np.testing.assert_array_equal(serial.arrays[key], pooled.arrays[key], err_msg=key)
    assert serial.info["sessions"] == pooled.info["sessions"]
    assert [s["seed"] for s in pooled.info["sessions"]] == [4, 5, 6]
    assert [s["steps"] for s in pooled.info["sessions"]] == [325, 325, 150]
    assert pooled.info["workers"] == 2 and serial.info["workers"] == 1
    loaded = GDDDataset.load(tmp_path / "pooled.npz")
    np.testing.assert_array_equal(loaded.qacc, serial.qacc)


def test_session_unit_and_bad_workers(tmp_path, capsys):
    out = run_session_unit(SessionUnit("hand", 0.65, 0, 10))
    assert out["steps"] == 325 and out["arrays"]["qpos"].shape[0] == 10 and out["seed"] == 0
    assert out["timestep"] == pytest.approx(0.002)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ParameterError, match="workers"):
            record("hand", 10, workers=bad)
    path = tmp_path / "d.npz"
    assert main(["record", "hand", "--records", "400", "--seconds", "0.65", "--workers", "2", "--out", str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["records"] == 400 and printed["workers"] == 2 and path.is_file()
    assert main(["record", "hand", "--records", "10", "--workers", "0", "--out", str(path)]) == 1
    assert "workers must be an integer >= 1" in capsys.readouterr().err


def test_parquet_output_keeps_every_rows_keys(tmp_path):
    """``pyarrow.Table.from_pylist`` takes its columns from the first row: a key that only later
    rows have (an error row's, the ``lost`` flag a resume needs) must still be written."""
    pytest.importorskip("pyarrow")
    from contactopt.sweep import SweepOutput, read_rows

    out = SweepOutput(tmp_path / "o.parquet")
    out.append({"id": "a", "seed": 0, "grid": {}, "cost": 1.5})
    out.append({"id": "b", "seed": 1, "grid": {}, "error": "error: boom", "lost": True})
    rows = {r["id"]: r for r in out.finalize(["a", "b"])}
    back = {r["id"]: r for r in read_rows(tmp_path / "o.parquet")}
    assert back["b"]["lost"] is True and back["b"]["error"] == "error: boom" and back["a"]["cost"] == 1.5
    assert back["a"]["lost"] is None and rows["b"]["lost"] is True
