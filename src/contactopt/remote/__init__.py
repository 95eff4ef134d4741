"""The network policy server: planner on one machine, plant on another (gRPC).

* ``contactopt serve TASK_OR_FILE`` — :class:`~contactopt.remote.server.PolicyServer`;
* :class:`PolicyClient` — a robot's (or another simulator's) connection: ``update_state``,
  ``control`` from the newest policy, evaluated locally;
* ``contactopt run TASK --remote HOST:PORT`` — the plant here, the planner there
  (:class:`~contactopt.remote.client.RemotePlanner`).

The service is defined in ``policy_server.proto`` (package ``contactopt.remote.v1``); the
generated modules are checked in (regenerate: ``python -m contactopt.remote.codegen``).
grpcio and protobuf are the ``[server]`` extra and are imported only when used.
See ``docs/remote.md``.
"""

from __future__ import annotations

__all__ = ["PolicyClient", "PolicyServer", "RemoteError", "RemotePlanner"]


def __getattr__(name):
    if name in ("PolicyClient", "RemotePlanner", "RemoteError"):
        from . import client

        return getattr(client, name)
    if name == "PolicyServer":
        from .server import PolicyServer

        return PolicyServer
    raise AttributeError(f"module 'contactopt.remote' has no attribute {name!r}")
