"""The viewer's web app: routes, the read-only and same-host guard, the pages.

Link scheme (``N`` is a folder's place on the command line, from 0; ``PATH`` a path under it,
as the catalog found it)::

    /                              the folders and the runs, reports and controls under them
    /run/N/PATH/?task=…&agent=…    the trials of a run, filtered (`oracle.view.filters`)
    /trial/N/PATH                  one trial: a trial folder, or a cell archive (….tar.gz)
    /controls?task=…               every task's controls result and control trials
    /report/N/PATH/                a report: its signed report.html, as signed
    /report/N/PATH/trials?…        the trials behind it (its inputs), filtered as a run's
    /report/N/PATH/trial/SHA256    the input archive with that sha256 (a redirect to /trial)

The last two are what a report's own page links to, relatively (``trials?agent=…``,
``trial/<sha256>``), so the page works served here whatever its folder is called.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from oracle.evidence.record import TrialRecord
from oracle.view.catalog import Catalog, TrialEntry, scan
from oracle.view.changes import sink_views, text
from oracle.view.filters import FINDINGS, FilterError, Filters, parse
from oracle.view.reading import NotVerified, Opened, Reader

HERE = Path(__file__).parent
#: No script runs on any page, whatever a record holds; styles come from the viewer only.
CSP = (
    "default-src 'none'; style-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
#: A report's page carries its style inline (it is one self-contained file).
REPORT_CSP = CSP.replace("style-src 'self'", "style-src 'unsafe-inline'")
_SHA = re.compile(r"^(?P<report>.*?)/?trial/(?P<sha>[0-9a-f]{64})$")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGI = Callable[[Scope, Receive, Send], Awaitable[None]]


class Guard:
    """Only GET and HEAD, only under the viewer's own host names (a page elsewhere that
    rebinds a name of its own to 127.0.0.1 is refused), and security headers on every
    answer."""

    def __init__(self, app: ASGI, hosts: set[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if scope["method"] not in ("GET", "HEAD"):
            response: Response = Response(
                "read-only: only GET and HEAD\n", 405, {"Allow": "GET, HEAD"}, "text/plain"
            )
            await response(scope, receive, send)
            return
        if self.hosts and headers.get("host", "") not in self.hosts:
            response = Response(
                f"this viewer answers only as {', '.join(sorted(self.hosts))}\n",
                403,
                media_type="text/plain",
            )
            await response(scope, receive, send)
            return

        async def secured(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                raw = list(message.get("headers", []))
                names = {k.lower() for k, _ in raw}
                if b"content-security-policy" not in names:
                    raw.append((b"content-security-policy", CSP.encode()))
                raw += [
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"cache-control", b"no-store"),
                ]
                message["headers"] = raw
            await send(message)

        await self.app(scope, receive, secured)


def url(kind: str, root: int, rel: str, slash: bool = False) -> str:
    """The viewer's URL of an item (`kind`: run, trial, report)."""
    tail = quote(rel) + ("/" if slash and rel else "")
    return f"/{kind}/{root}/{tail}"


def verdict_word(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _is_control(entry: TrialEntry, r: TrialRecord) -> bool:
    """A control run (scripted, not an agent's trial): archived under ``controls/``, or
    recorded with the harness ``controls``."""
    return entry.section == "controls" or r.cell.harness == "controls"


def changes_count(r: TrialRecord) -> int:
    return sum(len(d.get("changes", [])) for d in r.diff.values() if isinstance(d, dict))


class Viewer:
    """The pages over `folders`; the catalog is made again when a page names what it lacks
    (a run finished since), and on every visit of the index. Pages are made one at a time,
    on the server's one event loop: a page may hash files, and the reader's cache and the
    catalog then need no lock."""

    def __init__(self, folders: list[Path], reader: Reader, labels: list[str] | None = None):
        self.folders = folders
        self.labels = labels or [str(f) for f in folders]
        self.reader = reader
        self.catalog: Catalog = scan(folders, self.labels)
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.env.globals.update(
            url=url, verdict=verdict_word, text=text, changes_count=changes_count
        )

    def rescan(self) -> Catalog:
        self.catalog = scan(self.folders, self.labels)
        return self.catalog

    def page(self, template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        body = self.env.get_template(template).render(labels=self.labels, **ctx)
        return HTMLResponse(body, status)

    def error(self, status: int, message: str) -> HTMLResponse:
        return self.page("error.html", status, message=message)

    def _lookup(self, table: str, root: int, rel: str) -> Any:
        rel = rel.rstrip("/")
        found = getattr(self.catalog, table).get((root, rel))
        if found is None:
            found = getattr(self.rescan(), table).get((root, rel))
        return found

    # -- pages -------------------------------------------------------------------------------

    async def index(self, request: Request) -> Response:
        cat = self.rescan()
        folders = [
            {
                "n": n,
                "label": self.labels[n],
                "runs": cat.runs_of(n),
                "reports": sorted(
                    (r for r in cat.reports.values() if r.root == n), key=lambda r: r.rel
                ),
                "controls": sum(1 for c in cat.controls.values() if c.root == n),
            }
            for n in range(len(cat.roots))
        ]
        return self.page("index.html", folders=folders, truncated=cat.truncated)

    def _rows(self, entries: list[TrialEntry], filters: Filters) -> dict[str, Any]:
        rows, bad, controls = [], [], []
        for entry in entries:
            got = self.reader.trial(entry)
            if isinstance(got, NotVerified):
                bad.append({"entry": entry, "problems": got.problems})
                continue
            row = {"entry": entry, "r": got.record, "link": url("trial", entry.root, entry.rel)}
            if _is_control(entry, got.record):
                controls.append(row)
            elif filters.matches(got.record):
                rows.append(row)
        return {"rows": rows, "bad": bad, "control_rows": controls}

    def _filters(self, request: Request) -> Filters | HTMLResponse:
        query: dict[str, list[str]] = defaultdict(list)
        for k, v in request.query_params.multi_items():
            query[k].append(v)
        try:
            return parse(query)
        except FilterError as exc:
            return self.error(400, str(exc))

    def _choices(self, entries: list[TrialEntry]) -> dict[str, list[str]]:
        seen: dict[str, set[str]] = defaultdict(set)
        for entry in entries:
            got = self.reader.trial(entry)
            if isinstance(got, Opened) and got.record.cell.harness != "controls":
                seen["task"].add(got.record.cell.task)
                seen["agent"].add(got.record.cell.harness)
        return {k: sorted(v) for k, v in seen.items()}

    async def run(self, request: Request) -> Response:
        root, rel = int(request.path_params["root"]), str(request.path_params["rel"])
        run = self._lookup("runs", root, rel)
        if run is None:
            return self.error(404, f"no run at {rel!r} under folder {root}")
        filters = self._filters(request)
        if isinstance(filters, HTMLResponse):
            return filters
        return self.page(
            "run.html",
            title=f"{self.labels[root]}/{run.rel}" if run.rel else self.labels[root],
            total=len(run.trials),
            filters=filters,
            query=request.query_params,
            choices=self._choices(run.trials),
            findings=FINDINGS,
            **self._rows(run.trials, filters),
        )

    async def trial(self, request: Request) -> Response:
        root, rel = int(request.path_params["root"]), str(request.path_params["rel"])
        entry = self._lookup("trials", root, rel)
        if entry is None:
            return self.error(404, f"no trial at {rel!r} under folder {root}")
        got = self.reader.trial(entry)
        back = url("run", entry.root, entry.run, slash=True)
        where = f"{self.labels[root]}/{entry.rel}" if entry.rel else self.labels[root]
        if isinstance(got, NotVerified):
            # 409: the page is there, its content is not shown; a script sees it failed.
            return self.page("unverified.html", 409, where=where, problems=got.problems, back=back)
        r = got.record
        return self.page(
            "trial.html",
            where=where,
            back=back,
            t=got,
            r=r,
            sinks=sink_views(r.diff),
            usage=r.usage,
            metrics=[
                ("utility", "utility_achieved", r.utility_achieved),
                ("security (breached)", "security_breached", r.security_breached),
                ("invocation (autonomy)", "autonomy_achieved", r.autonomy_achieved),
            ],
        )

    async def controls(self, request: Request) -> Response:
        cat = self.rescan()
        only = request.query_params.getlist("task")
        files = []
        for found in sorted(cat.controls.values(), key=lambda c: (c.root, c.rel)):
            result = self.reader.controls(found)
            files.append({"entry": found, "got": result, "bad": isinstance(result, NotVerified)})
        control_trials: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for entry in cat.trials.values():
            got = self.reader.trial(entry)
            if not isinstance(got, Opened) or not _is_control(entry, got.record):
                continue
            if not only or got.record.cell.task in only:
                control_trials[got.record.cell.task].append(
                    {"r": got.record, "link": url("trial", entry.root, entry.rel)}
                )
        return self.page(
            "controls.html",
            files=files,
            only=only,
            trials={
                k: sorted(v, key=lambda x: x["link"]) for k, v in sorted(control_trials.items())
            },
        )

    async def report(self, request: Request) -> Response:
        root, rel = int(request.path_params["root"]), str(request.path_params["rel"])
        m = _SHA.match(rel)
        if m is not None:
            return self._report_trial(root, m["report"], m["sha"])
        if rel == "trials" or rel.endswith("/trials"):
            return self._report_trials(request, root, rel.removesuffix("trials").rstrip("/"))
        base = rel.removesuffix("report.html").rstrip("/") if rel.endswith("report.html") else rel
        entry = self._lookup("reports", root, base)
        if entry is None:
            return self.error(404, f"no report at {rel!r} under folder {root}")
        if not rel.endswith("/") and not rel.endswith("report.html") and rel:
            return RedirectResponse(url("report", root, base, slash=True), 308)
        got = self.reader.report(entry)
        if isinstance(got, NotVerified):
            where = f"{self.labels[root]}/{entry.rel}"
            return self.page("unverified.html", 409, where=where, problems=got.problems, back="/")
        return HTMLResponse(got[1], headers={"Content-Security-Policy": REPORT_CSP})

    def _report_inputs(self, root: int, rel: str) -> tuple[Any, set[str]] | HTMLResponse:
        entry = self._lookup("reports", root, rel)
        if entry is None:
            return self.error(404, f"no report at {rel!r} under folder {root}")
        got = self.reader.report(entry)
        if isinstance(got, NotVerified):
            return self.error(409, "the report does not verify: " + "; ".join(got.problems))
        return got[0], {i.sha256 for i in got[0].inputs}

    def _verified_by_sha(self, wanted: set[str]) -> dict[str, TrialEntry]:
        found: dict[str, TrialEntry] = {}
        for entry in self.catalog.trials.values():
            got = self.reader.trial(entry)
            if isinstance(got, Opened) and got.sha256 in wanted:
                found[got.sha256] = entry
        return found

    def _report_trial(self, root: int, rel: str, sha: str) -> Response:
        inputs = self._report_inputs(root, rel)
        if isinstance(inputs, HTMLResponse):
            return inputs
        if sha not in inputs[1]:
            return self.error(404, f"the report has no input with sha256 {sha}")
        found = self._verified_by_sha({sha}) or self._verified_by_sha_rescanned({sha})
        if sha not in found:
            return self.error(
                404,
                f"the archive with sha256 {sha} is not under the folders given to oracle view "
                "(give the run folder too), or it no longer verifies",
            )
        e = found[sha]
        return RedirectResponse(url("trial", e.root, e.rel), 303)

    def _verified_by_sha_rescanned(self, wanted: set[str]) -> dict[str, TrialEntry]:
        self.rescan()
        return self._verified_by_sha(wanted)

    def _report_trials(self, request: Request, root: int, rel: str) -> Response:
        inputs = self._report_inputs(root, rel)
        if isinstance(inputs, HTMLResponse):
            return inputs
        report, wanted = inputs
        filters = self._filters(request)
        if isinstance(filters, HTMLResponse):
            return filters
        found = self._verified_by_sha(wanted)
        entries = sorted(found.values(), key=lambda e: (e.root, e.rel))
        missing = sorted(i.path for i in report.inputs if i.sha256 not in found)
        return self.page(
            "run.html",
            title=f"trials of the report {report.title}",
            total=len(report.inputs),
            filters=filters,
            query=request.query_params,
            choices=self._choices(entries),
            findings=FINDINGS,
            missing=missing,
            **self._rows(entries, filters),
        )

    async def css(self, request: Request) -> Response:
        return Response((HERE / "static" / "view.css").read_bytes(), media_type="text/css")


def make_app(viewer: Viewer, hosts: set[str]) -> ASGI:
    """The ASGI app of `viewer`, answering only as one of `hosts` (``127.0.0.1:8000``…)."""
    routes = [
        Route("/", viewer.index),
        Route("/static/view.css", viewer.css),
        Route("/controls", viewer.controls),
        Route("/run/{root:int}/{rel:path}", viewer.run),
        Route("/trial/{root:int}/{rel:path}", viewer.trial),
        Route("/report/{root:int}/{rel:path}", viewer.report),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return viewer.error(404, f"nothing here: {request.url.path}")

    app = Starlette(routes=routes, exception_handlers={404: not_found})
    return Guard(app, hosts)
