"""The sandbox's own HTTP client builds its TLS context once per version of the CA bundle, and
a control's forked body inherits it from the harness instead of parsing the bundle again."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from oracle import Task, egress, run_trial
from oracle.sandbox import clients
from oracle.trial.agent import CallableAgent


def _bundle(tmp_path, name="bundle.pem"):
    path = tmp_path / name
    system = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
    path.write_bytes(Path(system).read_bytes())
    return path


def test_one_context_per_version_of_the_file(tmp_path):
    path = _bundle(tmp_path)
    first = clients.tls_context(str(path))
    assert clients.tls_context(str(path)) is first
    # Rewritten in place with the same bytes and its times put back: still a new version
    # (its change time moved), so it is read again.
    st = os.stat(path)
    path.write_bytes(path.read_bytes())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = clients.tls_context(str(path))
    assert second is not first
    # Replaced by another file under the same name: read again.
    other = _bundle(tmp_path, "other.pem")
    os.replace(other, path)
    assert clients.tls_context(str(path)) is not second
    assert clients.tls_context(None) is clients.tls_context(None)


def test_a_forked_control_body_reuses_the_harness_context(monkeypatch):
    """The body runs in a child process; it counts the contexts it builds and says how many
    in its reply. Two HTTPS requests through the recorder build none there."""
    built: list[object] = []
    real = ssl.create_default_context

    def counted(*args, **kwargs):
        built.append(args or kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)

    def body(view):
        answers = [view.http("GET", "https://wiki.test/a"), view.http("GET", "https://wiki.test/b")]
        return f"{[a.status for a in answers]} built={len(built)}"

    task = Task(
        name="client-tls",
        prompt="x",
        sinks=[egress("net", canned={"wiki.test/*": "page"})],
        utility=True,
        security=False,
    )
    before = len(built)
    record = run_trial(task, CallableAgent(body, name="body", timeout=30)).record
    assert record.error is None
    # Built once by the harness before the fork (the bundle is new for this sandbox) ...
    assert len(built) == before + 1
    # ... and none in the child, whose count started from the harness's.
    assert record.final_message == f"[200, 200] built={before + 1}"
