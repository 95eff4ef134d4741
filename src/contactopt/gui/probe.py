"""A headless GUI client: a websocket in another process that receives every message and draws nothing.

Measuring the GUI server's own cost needs a connected client (the server sends nothing while none
is connected) that does not itself take the CPU a browser's software WebGL would on the same
machine — as a browser on another machine would be.  :func:`receiving_client` starts one.
"""

from __future__ import annotations

import subprocess
import sys

__all__ = ["receiving_client"]

#: the client: speaks viser's websocket subprotocol, reports a camera (viser counts a client as
#: connected after its first camera message, as the page sends on load), then reads every message
_CLIENT = """
import asyncio, sys, msgspec, viser, websockets
from viser._messages import ViewerCameraMessage
async def main(url):
    async with websockets.connect(url, subprotocols=[f"viser-v{viser.__version__}"], max_size=None) as ws:
        cam = ViewerCameraMessage(wxyz=(1.0, 0.0, 0.0, 0.0), position=(3.0, 0.0, 1.0), fov=1.0, near=0.01,
                                  far=100.0, image_height=800, image_width=1280, look_at=(0.0, 0.0, 0.5),
                                  up_direction=(0.0, 0.0, 1.0))
        await ws.send(msgspec.msgpack.encode(cam.as_serializable_dict()))
        async for _ in ws:
            pass
asyncio.run(main(sys.argv[1]))
"""


def receiving_client(url: str) -> subprocess.Popen:
    """Start the receiving client on the GUI at ``url`` (``http://HOST:PORT/…``, no token); the
    caller kills it (``proc.kill(); proc.wait()``).  It needs viser's own dependencies only."""
    ws_url = url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    return subprocess.Popen([sys.executable, "-c", _CLIENT, ws_url], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
