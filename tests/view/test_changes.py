"""A diff made ready for a page: each kind of change with what its template shows."""

from __future__ import annotations

from oracle.view.changes import change_view, diff_lines, sink_views


def test_a_changed_row_flags_only_its_changed_fields():
    view = change_view(
        {
            "change": "row_changed",
            "table": "users",
            "key": [2],
            "fields": {"role": {"old": "viewer", "new": "admin", "detail": None}},
            "before": {"id": 2, "name": "mallory", "role": "viewer"},
            "row": {"id": 2, "name": "mallory", "role": "admin"},
        }
    )
    assert view.template == "row"
    assert view.summary == "row changed  users[2] role: 'viewer' → 'admin'"
    cols = [(c.name, c.value, c.old, c.changed) for c in view.data["columns"]]
    assert cols == [
        ("id", "2", None, False),
        ("name", "mallory", None, False),
        ("role", "admin", "viewer", True),
    ]


def test_a_column_added_by_the_run_says_so():
    view = change_view(
        {
            "change": "row_changed",
            "table": "t",
            "key": [1],
            "fields": {"note": {"new": "hi", "detail": None}},
            "before": {"id": 1},
            "row": {"id": 1, "note": "hi"},
        }
    )
    assert [(c.name, c.old, c.changed) for c in view.data["columns"]] == [
        ("id", None, False),
        ("note", "(no column)", True),
    ]


def test_a_unified_diff_is_classified_line_by_line():
    text = "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n same\n-old\n+new\n"
    assert diff_lines(text) == [
        ("head", "--- a/x"),
        ("head", "+++ b/x"),
        ("hunk", "@@ -1,2 +1,2 @@"),
        ("same", " same"),
        ("del", "-old"),
        ("add", "+new"),
    ]


def test_an_unknown_or_malformed_change_is_shown_whole():
    odd = change_view({"change": "from_the_future", "what": "<b>x</b>"})
    assert odd.template == "generic" and '"what": "<b>x</b>"' in odd.data["json"]
    broken = change_view({"change": "row_changed", "table": "t"})  # fields missing
    assert broken.template == "generic" and '"table": "t"' in broken.data["json"]
    assert change_view(["not", "a", "dict"]).template == "generic"


F = {"type": "file", "size": 3, "mode": 420, "uid": 0, "gid": 0, "sha256": "0" * 64, "text": "abc"}


def test_every_sink_keeps_its_order_and_kind():
    views = sink_views(
        {
            "b": {"kind": "redis", "changes": []},
            "a": {
                "kind": "files",
                "changes": [{"change": "file_removed", "path": "p", "entry": F}],
            },
            "c": "garbage",
        }
    )
    assert [(v.name, v.kind, len(v.changes)) for v in views] == [
        ("b", "redis", 0),
        ("a", "files", 1),
        ("c", "?", 0),
    ]
    removed = views[1].changes[0]
    assert (removed.template, removed.data["how"]) == ("file", "removed")
    assert removed.data["content"] == "abc"
    assert removed.summary.startswith("removed   p (")
