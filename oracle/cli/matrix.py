"""CLI commands for matrices, keys and reports (registered by `oracle.cli.app`)::

    oracle keys new                                  # ~/.config/oracle/keys/oracle.{key,pub}
    oracle matrix run matrices/demo.toml --out runs/m --jobs 2
    oracle matrix cells matrices/demo.toml           # list the cells without running them
    oracle reduce runs/m --expect matrices/demo.toml --out reports/m
    oracle report verify reports/m

Keys default to ``$XDG_CONFIG_HOME/oracle/keys`` (``~/.config/oracle/keys`` without it), outside
every run folder; ``--key`` names another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from oracle.base.signing import (
    KEY_NAME,
    KeyFileError,
    SignatureError,
    default_key_folder,
    default_private_key,
    default_public_key,
    key_id,
    load_private_key,
    load_public_key,
    new_key,
    write_key_pair,
)
from oracle.cli.render import console, plain
from oracle.matrix.reduce import ReduceFailed, expected_from, verify_run
from oracle.matrix.run import run_matrix
from oracle.matrix.spec import MatrixError, load_matrix
from oracle.reports.model import build_report
from oracle.reports.pages import verify_report, write_report

matrix_app = typer.Typer(no_args_is_help=True, help="Run a matrix of cells.")
keys_app = typer.Typer(no_args_is_help=True, help="Signing keys for archives and reports.")
report_app = typer.Typer(no_args_is_help=True, help="Check a report.")


def _fail(msg: str, code: int = 2) -> typer.Exit:
    # Never wrapped: a path in the message stays whole on its line.
    console().print(
        f"[red]error:[/red] {escape(msg)}", markup=True, highlight=False, soft_wrap=True
    )
    return typer.Exit(code)


KEY_FOLDER_HELP = "$XDG_CONFIG_HOME/oracle/keys, or ~/.config/oracle/keys"


@keys_app.command("new")
def keys_new(
    out: Annotated[
        Path | None,
        typer.Option(
            help=f"folder for the key pair, kept outside every run folder (default: "
            f"{KEY_FOLDER_HELP})"
        ),
    ] = None,
    name: Annotated[str, typer.Option(help="file stem: NAME.key and NAME.pub")] = KEY_NAME,
) -> None:
    """Write a new Ed25519 key pair: NAME.key (private, mode 0600) and NAME.pub."""
    out = out or default_key_folder()
    key = new_key()
    try:
        write_key_pair(key, out / f"{name}.key", out / f"{name}.pub")
    except (FileExistsError, OSError) as exc:
        raise _fail(str(exc)) from None
    console().print(f"wrote {out / (name + '.key')} (0600) and {out / (name + '.pub')}")
    console().print(f"key id {key_id(key.public_key())}")


@matrix_app.command("cells")
def matrix_cells(matrix: Annotated[Path, typer.Argument(help="the matrix file (TOML)")]) -> None:
    """List every cell of a matrix (its id and archive name) without running anything."""
    try:
        m = load_matrix(matrix)
        exp = expected_from(m)
    except MatrixError as exc:
        raise _fail(str(exc)) from None
    c = console()
    for cell in exp.cells:
        c.print(f"{cell.id}\t{cell.folder}", markup=False, highlight=False)
    c.print(f"{len(exp.cells)} cells", style="bold")


@matrix_app.command("run")
def matrix_run(
    matrix: Annotated[Path, typer.Argument(help="the matrix file (TOML)")],
    out: Annotated[Path, typer.Option(help="run folder: cells/ and controls/ go here")],
    key: Annotated[
        Path | None,
        typer.Option(
            help="private key that signs every archive; its folder is hidden from every "
            f"cell's agent (default: oracle.key in {KEY_FOLDER_HELP})"
        ),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="cells side by side")] = 1,
    executor: Annotated[
        str, typer.Option(help="local (this machine) or ray (a Ray cluster)")
    ] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster address (default: auto)")] = None,
) -> None:
    """Run every cell of MATRIX, each in a fresh sandbox; resume an interrupted run."""
    key = key or default_private_key()
    try:
        m = load_matrix(matrix)
        private = load_private_key(key)
    except (MatrixError, KeyFileError) as exc:
        raise _fail(str(exc)) from None
    c = console()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=c,
        transient=True,
    ) as progress:
        bar = progress.add_task(f"matrix {m.name}", total=None)

        def hook(stage: str, done: int, total: int) -> None:
            progress.update(bar, completed=done, total=total, description=f"{m.name}: {stage}")

        try:
            s = run_matrix(
                m,
                out,
                private,
                jobs=jobs,
                executor=executor,
                address=address,
                progress=hook,
                key_path=key,
            )
        except MatrixError as exc:
            raise _fail(str(exc)) from None
        except KeyboardInterrupt:
            c.print(
                "[yellow]interrupted[/yellow]: finished cells are kept; run the same command "
                "again to resume"
            )
            raise typer.Exit(130) from None
    for d in s.discarded:
        c.print(f"[yellow]discarded[/yellow] {plain(d)}")
    for f in s.foreign:
        c.print(f"[yellow]not in this matrix[/yellow] {plain(f)}")
    for t, how in s.controls.items():
        c.print(f"controls of {t}: {how}", markup=False)
    for i in s.invalid:
        c.print(f"[yellow]invalid execution[/yellow] {plain(i)}", highlight=False)
    refused = f" ({len(s.refused)} refused before signing)" if s.refused else ""
    c.print(
        f"{s.cells} cells: {len(s.written)} run now, {len(s.kept)} kept from before, "
        f"{len(s.invalid)} invalid{refused}; archives in {out / 'cells'}"
    )


@report_app.command("verify")
def report_verify(
    report: Annotated[Path, typer.Argument(help="the report folder")],
    key: Annotated[
        Path | None,
        typer.Option(
            help=f"public key of the report's signer (default: oracle.pub in {KEY_FOLDER_HELP})"
        ),
    ] = None,
) -> None:
    """Check a report's signature and the digests of its three files."""
    key = key or default_public_key()
    try:
        st = verify_report(report, load_public_key(key))
    except (SignatureError, KeyFileError, OSError) as exc:
        raise _fail(f"{report}: {exc}", 1) from None
    console().print(
        f"[green]verified[/green] {report}: matrix {st.predicate.get('matrix')}, "
        f"{st.predicate.get('attempts')} attempts"
    )


def reduce_command(
    run: Annotated[Path, typer.Argument(help="the run folder (searched recursively)")],
    expect: Annotated[Path, typer.Option(help="the matrix whose cells must all be there")],
    out: Annotated[Path, typer.Option(help="report folder (nothing is written elsewhere)")],
    key: Annotated[
        Path | None,
        typer.Option(
            help=f"public key that signed the archives (default: oracle.pub in {KEY_FOLDER_HELP})"
        ),
    ] = None,
    sign_key: Annotated[
        Path | None,
        typer.Option(help="private key that signs the report (default: KEY with .key suffix)"),
    ] = None,
    no_parity: Annotated[
        bool,
        typer.Option(
            "--no-parity",
            help="accept mixed oracle, Python, package and agent program versions, model "
            "providers or versions other than the matrix declares, and changed task code "
            "(refused by default); the report says so in its header",
        ),
    ] = False,
    require_parity: Annotated[
        bool,
        typer.Option(
            "--require-parity",
            hidden=True,
            help="deprecated: parity is required by default; this option does nothing",
        ),
    ] = False,
) -> None:
    """Verify every archive under RUN and reduce them into a signed report. Fails closed.

    Archives are read within the archive limits of the matrix (its ``[limits]``, else the
    defaults): the ones `oracle matrix run` checked every archive against before signing it."""
    key = key or default_public_key()
    try:
        m = load_matrix(expect)
        exp = expected_from(m)
        public = load_public_key(key)
        private = load_private_key(sign_key or key.with_suffix(".key"))
    except (MatrixError, KeyFileError) as exc:
        raise _fail(str(exc)) from None
    c = console()
    if require_parity and no_parity:
        raise _fail("--require-parity and --no-parity contradict each other")
    if require_parity:
        c.print(
            "[yellow]note:[/yellow] --require-parity is deprecated and does nothing: parity "
            "is required by default (--no-parity turns it off)"
        )
    if out.resolve().is_relative_to(run.resolve()):
        raise _fail(f"{out} is inside the run folder {run}: put the report elsewhere")
    try:
        verified = verify_run(run, exp, public, require_parity=not no_parity)
    except ReduceFailed as exc:
        for r in exc.rejections:
            c.print(f"[red]rejected[/red] {plain(r)}", highlight=False)
        rules = sorted({r.rule for r in exc.rejections})
        c.print(
            f"[red]{len(exc.rejections)} rejection(s) ({', '.join(rules)}); "
            "no report was made.[/red]"
        )
        raise typer.Exit(1) from None
    report = build_report(
        verified,
        matrix=m.name,
        matrix_digest=m.digest,
        signer_key_id=key_id(public),
        require_parity=not no_parity,
    )
    try:
        written = write_report(report, out, private)
    except OSError as exc:
        raise _fail(str(exc)) from None
    c.print(
        f"[green]verified {len(verified.cells)} archives[/green] "
        f"({report.invalid} invalid executions); parity {report.parity}; report: "
        + ", ".join(str(p) for p in written.values())
    )
