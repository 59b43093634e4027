"""`oracle view`: the trial viewer in the browser (registered by `oracle.cli.app`).

Only typer and the standard library are imported here; the viewer itself when the command
runs, so that `oracle --help` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer


def view_command(
    folders: Annotated[
        list[Path] | None,
        typer.Argument(
            help="run folders (oracle trial/demo/controls --out), matrix outputs and report "
            "folders; searched below (default: runs)",
            show_default=False,
        ),
    ] = None,
    port: Annotated[
        int,
        typer.Option(help="the port on 127.0.0.1 to listen on (default 0: a free one)", min=0),
    ] = 0,
    key: Annotated[
        Path | None,
        typer.Option(
            help="public key that signed the cell archives and reports (default: oracle.pub "
            "in $XDG_CONFIG_HOME/oracle/keys, or ~/.config/oracle/keys)"
        ),
    ] = None,
) -> None:
    """Browse runs, trials, controls and reports in a local, read-only web app.

    Listens on 127.0.0.1 only and prints its URL; Ctrl-C stops it. Nothing is shown before it
    verifies: a trial folder against its manifest.sha256, a cell archive and a report against
    their signatures (a trial that does not is listed as such, with the problem, never its
    content). See docs/view.md for the pages and their links.

    Exits 2 when a folder does not exist, the key cannot be read or the port is taken; 130
    when stopped with Ctrl-C."""
    from oracle.cli.exits import INTERRUPTED, USAGE

    paths = folders or [Path("runs")]
    missing = [str(p) for p in paths if not p.is_dir()]
    if missing:
        print(f"error: no such folder: {', '.join(missing)}", file=sys.stderr)
        raise typer.Exit(USAGE)
    from oracle.base.signing import KeyFileError, default_public_key, load_public_key

    key_path = key or default_public_key()
    public = None
    note = f"no key at {key_path}; give --key"
    if key is not None or key_path.is_file():
        try:
            public = load_public_key(key_path)
        except KeyFileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(USAGE) from None
    from oracle.view.server import bind, serve

    try:
        sock = bind(port)
    except OSError as exc:
        print(f"error: cannot listen on 127.0.0.1:{port}: {exc}", file=sys.stderr)
        raise typer.Exit(USAGE) from None

    def announce(url: str) -> None:
        print(f"oracle view: {url} (Ctrl-C stops it)", flush=True)
        if public is None:
            print(f"note: signed archives and reports will not verify: {note}", flush=True)

    try:
        serve(paths, sock, public, note, announce)
    except KeyboardInterrupt:
        print("stopped", flush=True)
        raise typer.Exit(INTERRUPTED) from None
    finally:
        sock.close()
