"""The world's refs read from the repository's files give what `git for-each-ref` gives, in
every state git itself leaves a repository in; where the files hold anything else, git is
asked."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from oracle.sinks.github import git as gitread

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def sh(repo: Path, *argv: str, input: str | None = None) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), *argv],
        input=input,
        capture_output=True,
        text=True,
        check=True,
        env=gitread.clean_env(
            {
                "GIT_AUTHOR_NAME": "a",
                "GIT_AUTHOR_EMAIL": "a@example.com",
                "GIT_COMMITTER_NAME": "a",
                "GIT_COMMITTER_EMAIL": "a@example.com",
            }
        ),
    ).stdout.strip()


def commit(repo: Path, message: str, parent: str | None = None) -> str:
    tree = sh(repo, "mktree", input="")
    return sh(repo, "commit-tree", tree, "-m", message, *(["-p", parent] if parent else []))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "r.git"
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True, env=gitread.clean_env())
    return path


def both(repo: Path) -> tuple[dict[str, str] | None, dict[str, str]]:
    gitread._PEELED.clear()
    return gitread._read_refs(repo), gitread._refs_by_git(repo)


def test_loose_packed_and_tagged_refs_read_as_git_lists_them(repo):
    first = commit(repo, "first")
    second = commit(repo, "second", first)
    sh(repo, "update-ref", "refs/heads/main", second)
    sh(repo, "update-ref", "refs/heads/feat/x-1.2", first)
    sh(repo, "update-ref", "refs/pull/1/head", second)
    sh(repo, "tag", "light", first)
    sh(repo, "tag", "-a", "-m", "v1", "v1", second)
    # A tag of a tag: a ref to it reads as the inner tag, one level down, as git lists it.
    sh(repo, "tag", "-a", "-m", "outer", "outer", "v1")
    read, listed = both(repo)
    assert read == listed
    assert read["refs/tags/v1"] == second and read["refs/tags/outer"] != second
    sh(repo, "pack-refs", "--all")
    assert not (repo / "refs" / "heads" / "main").exists()
    read, listed = both(repo)
    assert read == listed and read["refs/tags/outer"] == listed["refs/tags/outer"]
    # A loose ref over its packed self, and a packed ref deleted (packed-refs rewritten).
    sh(repo, "update-ref", "refs/heads/main", first)
    sh(repo, "update-ref", "-d", "refs/heads/feat/x-1.2")
    read, listed = both(repo)
    assert read == listed
    assert read["refs/heads/main"] == first and "refs/heads/feat/x-1.2" not in read
    # The second read looks nothing up: every object is known, and it still agrees.
    assert gitread._read_refs(repo) == listed


def test_an_empty_repository_has_no_refs(repo):
    assert both(repo) == ({}, {})


@pytest.mark.parametrize(
    "odd",
    [
        "symbolic",  # refs/remotes/origin/HEAD: ref: refs/heads/main
        "lock",  # a ref being written: refs/heads/main.lock, which git skips
        "broken",  # a ref to an object the repository lacks, which git refuses to list
        "garbage",  # a file that is no ref
        "reftable",
    ],
)
def test_files_git_would_read_otherwise_are_left_to_git(repo, odd):
    head = commit(repo, "first")
    sh(repo, "update-ref", "refs/heads/main", head)
    refs = repo / "refs"
    if odd == "symbolic":
        (refs / "remotes" / "origin").mkdir(parents=True)
        (refs / "remotes" / "origin" / "HEAD").write_text("ref: refs/heads/main\n")
    elif odd == "lock":
        (refs / "heads" / "main.lock").write_text(commit(repo, "next", head) + "\n")
    elif odd == "broken":
        (refs / "heads" / "gone").write_text("1" * 40 + "\n")
    elif odd == "garbage":
        (refs / "heads" / "notes").write_text("not a ref\n")
    else:
        (repo / "reftable").mkdir()
    gitread._PEELED.clear()
    assert gitread._read_refs(repo) is None
    if odd == "broken":
        with pytest.raises(gitread.GitError, match="missing object"):
            gitread.refs(repo)
        return
    assert gitread.refs(repo) == gitread._refs_by_git(repo)
    assert gitread.refs(repo)["refs/heads/main"] == head


def test_a_packed_refs_file_git_did_not_write_is_left_to_git(repo):
    head = commit(repo, "first")
    sh(repo, "update-ref", "refs/heads/main", head)
    sh(repo, "pack-refs", "--all")
    packed = repo / "packed-refs"
    packed.write_text(packed.read_text() + "^" + head + "\n^" + head + "\n")
    gitread._PEELED.clear()
    assert gitread._read_refs(repo) is None
