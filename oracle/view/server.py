"""Serving the viewer: bound to 127.0.0.1 only, on a given port or a free one."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from oracle.view.app import Viewer, make_app
from oracle.view.reading import Reader

#: The only address the viewer listens on: it serves what the agent wrote, to this machine.
HOST = "127.0.0.1"


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` (0: a free port); `OSError` if it is taken."""
    # IPPROTO_TCP named, so that asyncio turns Nagle off on the connections it accepts (see
    # oracle.fixtures.github.service: a kept-alive connection's answers waited ~40 ms each).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    return sock


def serve(
    folders: list[Path],
    sock: socket.socket,
    public: Ed25519PublicKey | None,
    key_note: str,
    announce: Callable[[str], None],
) -> None:
    """Serve the viewer of `folders` on `sock` until interrupted; `announce` gets its URL
    once it is ready to answer. Ctrl-C ends it (a `KeyboardInterrupt` after a clean stop)."""
    import uvicorn

    port = sock.getsockname()[1]
    hosts = {f"{HOST}:{port}", f"localhost:{port}"}
    viewer = Viewer(folders, Reader(public, key_note))
    config = uvicorn.Config(
        make_app(viewer, hosts), log_level="warning", access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    announce(f"http://{HOST}:{port}/")
    server.run(sockets=[sock])
