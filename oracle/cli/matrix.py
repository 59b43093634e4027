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

from oracle.cli.exits import FAILED, USAGE
from oracle.cli.outcome import JsonOpt, current, fail, json_command, problem
from oracle.cli.report_trials import report_trials

# Only typer and the standard library here (see oracle.cli.app): each command imports what it
# uses, so that `oracle --help` does not load the matrix, the reports or the key code.

#: `oracle.base.signing.KEY_NAME`, written out so that the option's default needs no import (a
#: test holds the two equal).
KEY_NAME = "oracle"

matrix_app = typer.Typer(no_args_is_help=True, help="Run a matrix of cells.")
keys_app = typer.Typer(no_args_is_help=True, help="Signing keys for archives and reports.")
report_app = typer.Typer(
    no_args_is_help=True,
    help="Check a report, or make an unsigned one from trial folders.",
)
report_app.command("trials")(report_trials)


def _fail(msg: str, code: int = USAGE) -> typer.Exit:
    # Never wrapped: a path in the message stays whole on its line.
    return fail(msg, code)


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
    name: Annotated[
        str, typer.Option(help="file stem: NAME.key and NAME.pub", metavar="NAME")
    ] = KEY_NAME,
) -> None:
    """Write a new Ed25519 key pair: NAME.key (private, mode 0600) and NAME.pub."""
    from oracle.base.signing import default_key_folder, key_id, new_key, write_key_pair
    from oracle.cli.render import console, plain

    out = out or default_key_folder()
    key = new_key()
    try:
        write_key_pair(key, out / f"{name}.key", out / f"{name}.pub")
    except (FileExistsError, OSError) as exc:
        raise _fail(str(exc)) from None
    console().print(
        f"wrote {plain(out / (name + '.key'))} (0600) and {plain(out / (name + '.pub'))}",
        highlight=False,
    )
    console().print(f"key id {key_id(key.public_key())}")


@matrix_app.command("cells")
def matrix_cells(
    matrix: Annotated[Path, typer.Argument(help="the matrix file (TOML)", metavar="MATRIX")],
) -> None:
    """List every cell of a matrix (its id and archive name) without running anything."""
    from oracle.cli.render import console
    from oracle.matrix.reduce import expected_from
    from oracle.matrix.spec import MatrixError, load_matrix

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
    matrix: Annotated[Path, typer.Argument(help="the matrix file (TOML)", metavar="MATRIX")],
    out: Annotated[Path, typer.Option(help="run folder: cells/ and controls/ go here")],
    key: Annotated[
        Path | None,
        typer.Option(
            help="private key that signs every archive; its folder is hidden from every "
            f"cell's agent (default: oracle.key in {KEY_FOLDER_HELP})"
        ),
    ] = None,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=1, help="cells side by side", metavar="COUNT")
    ] = 1,
    executor: Annotated[
        str, typer.Option(help="local (this machine) or ray (a Ray cluster)", metavar="KIND")
    ] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: auto)", metavar="ADDRESS")
    ] = None,
) -> None:
    """Run every cell of MATRIX, each in a fresh sandbox; resume an interrupted run."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from oracle.base.signing import KeyFileError, default_private_key, load_private_key
    from oracle.cli.render import console, plain
    from oracle.matrix.run import run_matrix
    from oracle.matrix.spec import MatrixError, load_matrix

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
        f"{len(s.invalid)} invalid{refused}; archives in {plain(out / 'cells')}",
        highlight=False,
    )


@report_app.command("verify")
def report_verify(
    report: Annotated[Path, typer.Argument(help="the report folder", metavar="REPORT")],
    key: Annotated[
        Path | None,
        typer.Option(
            help=f"public key of the report's signer (default: oracle.pub in {KEY_FOLDER_HELP})"
        ),
    ] = None,
) -> None:
    """Check a report's signature and the digests of its three files.

    Exits 1 when it does not verify, 2 when REPORT does not exist or the key cannot be read."""
    from oracle.base.signing import (
        KeyFileError,
        SignatureError,
        default_public_key,
        load_public_key,
    )
    from oracle.cli.render import console, plain
    from oracle.reports.pages import verify_report

    if not report.is_dir():
        raise _fail(f"{report}: does not exist or is not a folder")
    key = key or default_public_key()
    try:
        public = load_public_key(key)
    except KeyFileError as exc:
        raise _fail(str(exc)) from None
    try:
        st = verify_report(report, public)
    except (SignatureError, OSError) as exc:
        raise _fail(f"{report}: {exc}", FAILED) from None
    console().print(
        f"[green]verified[/green] {plain(report)}: matrix {plain(st.predicate.get('matrix'))}, "
        f"{st.predicate.get('attempts')} attempts",
        highlight=False,
    )


@json_command("reduce")
def reduce_command(
    run: Annotated[
        Path, typer.Argument(help="the run folder (searched recursively)", metavar="RUN")
    ],
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
    prices: Annotated[
        Path | None,
        typer.Option(
            "--prices",
            help="price table (TOML or JSON: USD per million tokens per model) that gives the "
            "observed model usage a cost (default: $ORACLE_PRICES; none: no cost)",
            metavar="FILE",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify every archive under RUN and reduce them into a signed report. Fails closed.

    Archives are read within the archive limits of the matrix (its ``[limits]``, else the
    defaults): the ones `oracle matrix run` checked every archive against before signing it.
    Exits 1 when an archive is rejected (no report is made), 2 on a usage error (a matrix,
    key or price table that cannot be read, a RUN that does not exist)."""
    from oracle.base.signing import (
        KeyFileError,
        default_public_key,
        key_id,
        load_private_key,
        load_public_key,
    )
    from oracle.cli.output_reduce import ReduceOutput, RejectionOut
    from oracle.cli.render import console, plain
    from oracle.evidence.prices import PriceError, PriceTable
    from oracle.matrix.reduce import ReduceFailed, expected_from, verify_run
    from oracle.matrix.spec import MatrixError, load_matrix
    from oracle.reports.model import build_report
    from oracle.reports.pages import write_report

    key = key or default_public_key()
    try:
        m = load_matrix(expect)
        exp = expected_from(m)
        public = load_public_key(key)
        private = load_private_key(sign_key or key.with_suffix(".key"))
        table = PriceTable.load(prices) if prices is not None else PriceTable.from_env()
    except (MatrixError, KeyFileError, PriceError) as exc:
        raise _fail(str(exc)) from None
    c = console()
    if require_parity and no_parity:
        raise _fail("--require-parity and --no-parity contradict each other")
    if require_parity:
        c.print(
            "[yellow]note:[/yellow] --require-parity is deprecated and does nothing: parity "
            "is required by default (--no-parity turns it off)"
        )
    if not run.is_dir():
        raise _fail(f"{run}: does not exist or is not a folder")
    if out.resolve().is_relative_to(run.resolve()):
        raise _fail(f"{out} is inside the run folder {run}: put the report elsewhere")
    doc = current(ReduceOutput)
    try:
        verified = verify_run(run, exp, public, require_parity=not no_parity)
    except ReduceFailed as exc:
        for r in exc.rejections:
            c.print(f"[red]rejected[/red] {plain(r)}", highlight=False)
            problem(f"rejected {r}")
        doc.rejections = [
            RejectionOut(where=r.where, rule=r.rule, detail=r.detail) for r in exc.rejections
        ]
        rules = sorted({r.rule for r in exc.rejections})
        c.print(
            f"[red]{len(exc.rejections)} rejection(s) ({', '.join(rules)}); "
            "no report was made.[/red]"
        )
        raise typer.Exit(FAILED) from None
    report = build_report(
        verified,
        matrix=m.name,
        matrix_digest=m.digest,
        signer_key_id=key_id(public),
        require_parity=not no_parity,
        prices=table,
    )
    try:
        written = write_report(report, out, private)
    except OSError as exc:
        raise _fail(str(exc)) from None
    doc.report = report
    doc.written = {name: str(path) for name, path in written.items()}
    c.print(
        f"[green]verified {len(verified.cells)} archives[/green] "
        f"({report.invalid} invalid executions); parity {plain(report.parity)}; report: "
        + plain(", ".join(str(p) for p in written.values())),
        highlight=False,
    )
