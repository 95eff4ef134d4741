"""Regenerate the checked-in gRPC modules from ``policy_server.proto``.

Run from anywhere (needs ``grpcio-tools``)::

    python -m contactopt.remote.codegen            # rewrite policy_server_pb2*.py in place
    python -m contactopt.remote.codegen --check    # exit 1 if the checked-in files are stale

The test ``tests/test_remote_proto.py`` regenerates into a temporary folder and compares,
so the checked-in code cannot drift from the ``.proto``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

__all__ = ["GENERATED", "PROTO", "generate", "stale_files"]

#: the service definition
PROTO = Path(__file__).with_name("policy_server.proto")
#: the modules generated from it, checked in beside it
GENERATED = ("policy_server_pb2.py", "policy_server_pb2_grpc.py")


def generate(out_root: Path) -> list[Path]:
    """Run ``grpc_tools.protoc`` on :data:`PROTO` writing under ``out_root`` (a ``src``-like root:
    files land in ``out_root/contactopt/remote/``); returns the generated paths."""
    from grpc_tools import protoc

    src_root = PROTO.parents[2]  # .../src
    out_root = Path(out_root)
    (out_root / "contactopt" / "remote").mkdir(parents=True, exist_ok=True)
    rel = PROTO.relative_to(src_root).as_posix()
    rc = protoc.main(["grpc_tools.protoc", f"-I{src_root}", f"--python_out={out_root}",
                      f"--grpc_python_out={out_root}", rel])
    if rc != 0:
        raise RuntimeError(f"protoc failed on {rel} (exit {rc})")
    return [out_root / "contactopt" / "remote" / name for name in GENERATED]


def stale_files() -> list[str]:
    """Names of the checked-in generated files that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        return [p.name for p in fresh
                if not (PROTO.parent / p.name).is_file() or (PROTO.parent / p.name).read_bytes() != p.read_bytes()]


def main(argv=None) -> int:
    """``python -m contactopt.remote.codegen [--check]``."""
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        stale = stale_files()
        if stale:
            print(f"stale generated files: {', '.join(stale)} (run python -m contactopt.remote.codegen)")
            return 1
        print("generated files are up to date")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for p in generate(Path(tmp)):
            (PROTO.parent / p.name).write_bytes(p.read_bytes())
            print(f"wrote {PROTO.parent / p.name}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
