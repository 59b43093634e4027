"""The real `oracle view` over real runs, asked with the real curl: every trial listed, nothing
shown unverified, nothing outside the folders reachable, read-only, loopback only."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import require_tools
from tests.view.conftest import MARK, SECRET, Runs, Served, start_view, stop


def curl(url: str, *args: str) -> tuple[int, str]:
    """(HTTP status, body) of a real curl request; ``--path-as-is`` keeps ``..`` as sent."""
    require_tools("curl")
    proc = subprocess.run(
        ["curl", "-s", "--path-as-is", "-o", "-", "-w", "\n%{http_code}", *args, url],
        capture_output=True,
        text=True,
        timeout=30,
    )
    body, _, code = proc.stdout.rpartition("\n")
    return int(code), body


def trial_folders(run: Path) -> list[Path]:
    return sorted(p.parent for p in run.glob("*/manifest.sha256"))


def test_curl_of_a_run_lists_every_trial(runs: Runs, view: Served):
    folders = trial_folders(runs.base / "runs" / "demo")
    assert len(folders) == (10 if runs.redis else 8)
    status, body = curl(view.url + "run/0/demo/")
    assert status == 200
    for folder in folders:
        assert f'href="/trial/0/demo/{folder.name}"' in body, folder.name
    assert body.count('<tr class="trial">') == len(folders)
    assert f"{len(folders)} trial archive(s) · {len(folders)} listed" in body


def test_the_index_lists_runs_reports_and_controls(view: Served):
    status, body = curl(view.url)
    assert status == 200
    # runs/controls holds control runs only: the "controls" section of the run runs/ itself.
    for run in ("/run/0/demo/", "/run/0/hostile/", "/run/0/", "/run/1/"):
        assert f'href="{run}"' in body, run
    assert 'href="/report/2/m/"' in body
    assert "escape" not in body  # a link out of the folder is not followed


def test_filters_are_query_parameters(runs: Runs, view: Served):
    _, body = curl(view.url + "run/0/demo/?agent=obedient&security=true")
    n = 5 if runs.redis else 4
    assert body.count('<tr class="trial">') == n
    assert "careful__" not in body
    _, body = curl(view.url + "run/0/demo/?agent=careful&security=true")
    assert body.count('<tr class="trial">') == 0
    _, body = curl(view.url + "run/0/demo/?task=key-exfil&finding=scope")
    assert body.count('<tr class="trial">') == 1 and "key-exfil__obedient" in body
    _, body = curl(view.url + "run/0/demo/?task=user-rename&task=log-level&utility=true")
    assert body.count('<tr class="trial">') == 4


def test_a_bad_filter_is_a_clear_error(view: Served):
    status, body = curl(view.url + "run/0/demo/?utility=maybe")
    assert status == 400
    assert "query parameter &#39;utility&#39; takes true, false or unknown" in body
    status, body = curl(view.url + "run/0/demo/?colour=red")
    assert status == 400 and "unknown query parameter &#39;colour&#39;" in body


def test_a_tampered_trial_is_listed_as_not_verifying_and_never_shown(view: Served):
    status, body = curl(view.url + "run/0/tampered/")
    assert status == 200
    assert "does not verify" in body and "record.json does not match its digest" in body
    assert MARK not in body
    status, body = curl(view.url + "trial/0/tampered/user-rename__obedient__none__default__r0")
    assert status == 409
    assert 'id="unverified"' in body and "record.json does not match its digest" in body
    assert MARK not in body and "mallory" not in body


def test_a_changed_cell_archive_does_not_verify(view: Served):
    _, body = curl(view.url + "run/0/badcells/")
    assert "does not verify" in body and "archive-digest-mismatch" in body
    assert '<tr class="trial">' not in body


def test_signed_cells_verify_with_the_key(view: Served):
    _, body = curl(view.url + "run/1/")
    assert body.count('<tr class="trial">') == 2
    assert "0 not verified" in body


@pytest.mark.parametrize(
    "path",
    [
        "trial/0/../outside/secret-trial",
        "trial/0/%2e%2e/outside/secret-trial",
        "trial/0/%2E%2E%2Foutside%2Fsecret-trial",
        "trial/0/escape/linked",
        "run/0/escape/linked/",
        "trial/0//etc/passwd",
        "trial/0/%2Fetc%2Fpasswd",
        "trial/0/../../../../../../etc/passwd",
        "report/2/..%2f..%2fetc/report.html",
        "static/..%2f..%2fapp.py",
        "static/../../../../etc/passwd",
        "trial/9/anything",
    ],
)
def test_no_path_reads_outside_the_folders(view: Served, path: str):
    status, body = curl(view.url + path)
    assert status in (404, 400), (status, body[:200])
    assert SECRET not in body and "root:x:0:0" not in body and "import" not in body


def test_a_link_inside_a_trial_folder_is_not_followed(view: Served):
    _, listing = curl(view.url + "run/0/linking/")
    assert "logs/agent.stdout is a link" in listing and SECRET not in listing
    status, body = curl(view.url + "trial/0/linking/user-rename__obedient__none__default__r0")
    assert status == 409 and "logs/agent.stdout is a link" in body
    assert SECRET not in body


def test_only_get_and_head(view: Served):
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        status, body = curl(view.url + "run/0/demo/", "-X", method, "-d", "x=1")
        assert status == 405, method
        assert "read-only" in body
    status, body = curl(view.url + "run/0/demo/", "-I")
    assert status == 200 and "content-security-policy" in body.lower()  # the headers alone


def test_every_page_forbids_scripts(view: Served):
    proc = subprocess.run(
        ["curl", "-s", "-D", "-", "-o", "/dev/null", view.url + "run/0/hostile/"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    headers = proc.stdout.lower()
    assert "content-security-policy: default-src 'none'" in headers
    assert "script-src" not in headers  # default-src 'none' covers scripts: none may run
    assert "x-content-type-options: nosniff" in headers


def test_another_host_name_is_refused(view: Served):
    """A page elsewhere that points a name of its own at 127.0.0.1 (DNS rebinding) gets
    nothing: the viewer answers only as 127.0.0.1 and localhost."""
    status, body = curl(view.url + "run/0/demo/", "-H", f"Host: attacker.test:{view.port}")
    assert status == 403
    assert "user-rename" not in body
    status, _ = curl(view.url + "run/0/demo/", "-H", f"Host: localhost:{view.port}")
    assert status == 200


def _listening_addresses(port: int) -> set[str]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, _, hexport = local.rpartition(":")
            if int(hexport, 16) == port and state == "0A":  # LISTEN
                found.add(addr)
    return found


def test_it_binds_loopback_only(view: Served):
    assert _listening_addresses(view.port) == {"0100007F"}  # 127.0.0.1, and nothing else
    others = [
        a
        for a in subprocess.run(
            ["hostname", "-I"], capture_output=True, text=True, check=False
        ).stdout.split()
        if ":" not in a
    ]
    for addr in others:
        with pytest.raises(OSError), socket.create_connection((addr, view.port), timeout=2):
            pass


def test_the_report_links_to_the_trials_behind_its_rates(runs: Runs, view: Served):
    status, page = curl(view.url + "report/2/m/")
    assert status == 200
    assert (
        'href="trials?agent=obedient&amp;model=none&amp;profile=default&amp;task=user-rename"'
        in page
    )
    _, body = curl(
        view.url + "report/2/m/trials?agent=obedient&model=none&profile=default&task=user-rename"
    )
    assert body.count('<tr class="trial">') == 1
    assert 'href="/trial/1/cells/user-rename__obedient__none__default__r0.tar.gz"' in body
    report = json.loads((runs.base / "reports" / "m" / "report.json").read_text())
    for i in report["inputs"]:
        assert f'href="trial/{i["sha256"]}"' in page
        proc = subprocess.run(
            [
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{redirect_url}",
                view.url + f"report/2/m/trial/{i['sha256']}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        code, where = proc.stdout.split()
        assert code == "303" and where.endswith("/trial/1/" + i["path"])
    status, _ = curl(view.url + "report/2/m/trial/" + "0" * 64)
    assert status == 404


def test_a_report_that_does_not_verify_is_not_shown(runs: Runs, tmp_path: Path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(runs.base / "reports" / "m", bad)
    html = bad / "report.html"
    html.write_text(html.read_text().replace("</h1>", f"</h1>{MARK}", 1))
    served = start_view(str(tmp_path), "--key", str(runs.pub))
    try:
        status, body = curl(served.url + "report/0/bad/")
        assert status == 409 and "does not verify" in body
        assert "report.html is not the file that was signed" in body
        assert MARK not in body
    finally:
        stop(served)


def test_controls_of_each_task(view: Served):
    _, body = curl(view.url + "controls?task=user-rename")
    assert "someone_made_admin" in body and "proven" in body
    assert "make_mallory_admin" in body  # a control run, archived by oracle controls --out
    assert 'href="/trial/0/controls/user-rename__controls__breach__make_mallory_admin__r0"' in body
    assert "signed controls record" in body  # the matrix output's controls/


def test_ctrl_c_stops_it_without_a_traceback(runs: Runs):
    served = start_view(str(runs.base / "runs"), "--port", "0")
    status, _ = curl(served.url)
    assert status == 200
    code, err = stop(served)
    assert code in (0, 130)
    assert "Traceback" not in err


def test_a_missing_folder_is_a_usage_error(tmp_path: Path):
    from tests.view.conftest import ORACLE

    proc = subprocess.run(
        [ORACLE, "view", str(tmp_path / "nope")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert f"no such folder: {tmp_path / 'nope'}" in proc.stderr


def test_a_taken_port_is_a_usage_error(view: Served):
    from tests.view.conftest import ORACLE

    proc = subprocess.run(
        [ORACLE, "view", "--port", str(view.port), "."],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{view.port}" in proc.stderr


def test_an_unsigned_report_links_to_its_verified_trial_folders(runs: Runs, view: Served):
    status, page = curl(view.url + "report/2/adhoc/")
    assert status == 200 and 'id="unsigned"' in page  # its own mark, as written
    query = "trials?agent=obedient&model=none&profile=default&task=user-rename"
    assert f'href="{query.replace("&", "&amp;")}"' in page
    _, body = curl(view.url + "report/2/adhoc/" + query)
    assert body.count('<tr class="trial">') == 1
    assert 'href="/trial/0/demo/user-rename__obedient__none__default__r0"' in body
    report = json.loads((runs.base / "reports" / "adhoc" / "report.json").read_text())
    some = report["inputs"][0]
    proc = subprocess.run(
        [
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{redirect_url}",
            view.url + f"report/2/adhoc/trial/{some['sha256']}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    code, where = proc.stdout.split()
    assert code == "303" and "/trial/0/demo/" in where


def test_a_report_without_its_signature_is_not_shown_unless_it_says_so(runs: Runs, tmp_path: Path):
    import shutil

    bad = tmp_path / "stripped"
    shutil.copytree(runs.base / "reports" / "m", bad)
    (bad / "report.dsse.json").unlink()
    served = start_view(str(tmp_path), "--key", str(runs.pub))
    try:
        status, body = curl(served.url + "report/0/stripped/")
        assert status == 409 and "does not verify" in body
        assert "no report.dsse.json, and the report does not say it is unsigned" in body
        assert "Claim boundary" not in body
    finally:
        stop(served)


def test_the_socket_it_serves_on_turns_nagle_off_on_each_connection():
    """The viewer's listening socket is made so that the event loop serving it turns Nagle off
    on every connection it accepts (asyncio does so only for sockets made as IPPROTO_TCP):
    with Nagle on, each answer on a kept-alive connection waited ~40 ms for the browser's
    delayed ACK. The socket `bind` gives is served here by asyncio, as uvicorn serves it."""
    import asyncio

    from oracle.view.server import bind

    async def main() -> list[int]:
        found: list[int] = []

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            found.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        listening = bind(0)
        server = await asyncio.start_server(accepted, sock=listening)
        async with server:
            port = listening.getsockname()[1]
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            for _ in range(100):
                if found:
                    break
                await asyncio.sleep(0.05)
        return found

    assert asyncio.run(main()) == [1]
