"""The judge's disk cache: one answer per question, so that re-scoring a record, or a matrix that
asks the same judge about the same output again, does not ask the model again.

The key is the SHA-256 of the question: backend, model, system and user text (which carry the
rubric and the attributed content) and the token budget. Only answers are kept; an error, a
timeout or rate limits past the retries are asked again next time.

    cache = JudgeCache(Path("~/.cache/oracle/judge").expanduser())
    answer = cache.get(call)          # None: not asked yet (or the file was unreadable)
    cache.put(call, answer)

`ModelCall` and `ModelAnswer`, the question and the answer `oracle.judging.llm.backends` deals
in, are defined here, with what keeps them (the backends import this module, not the reverse).

The folder is ``ORACLE_JUDGE_CACHE`` (``off``, ``0`` or empty: no cache), by default
``$XDG_CACHE_HOME/oracle/judge`` (``~/.cache/oracle/judge``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from oracle.base.fsops import user_cache_dir

CACHE_ENV = "ORACLE_JUDGE_CACHE"
DISABLED = ("off", "0", "")


@dataclass(frozen=True)
class ModelCall:
    """What to ask one model once: `system` carries the rubric, `user` the attributed output.

    `timeout` is in seconds, for each attempt; `max_tokens` bounds the answer.
    """

    backend: str  # "openai" | "anthropic" | "inspect"
    model: str
    system: str
    user: str
    timeout: float = 60.0
    max_tokens: int = 1024


@dataclass(frozen=True)
class ModelAnswer:
    """What the provider answered: its text (None: none), the model as the provider named it,
    why it stopped, a refusal, how many calls it took, and whether it came from the cache."""

    text: str | None
    model: str | None
    finish: str | None = None
    refusal: str | None = None
    attempts: int = 1
    cached: bool = False


def cache_key(call: ModelCall) -> str:
    """The digest that names `call`'s answer: its backend, model, prompts and token budget."""
    question = {
        "backend": call.backend,
        "model": call.model,
        "system": call.system,
        "user": call.user,
        "max_tokens": call.max_tokens,
    }
    canonical = json.dumps(question, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class JudgeCache:
    """Answers kept under `folder`, one JSON file per question (``<key[:2]>/<key>.json``).

    The folder is made on the first `put`. A file that cannot be read or parsed is a miss, and
    the next `put` replaces it.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, call: ModelCall) -> Path:
        key = cache_key(call)
        return self.folder / key[:2] / f"{key}.json"

    def get(self, call: ModelCall) -> ModelAnswer | None:
        """The kept answer to `call` (with ``cached=True``), or None."""
        try:
            data = json.loads(self.path(call).read_text(encoding="utf-8"))
            answer = ModelAnswer(**_fields(data))
        except (OSError, ValueError, TypeError):
            return None
        return replace(answer, cached=True)

    def put(self, call: ModelCall, answer: ModelAnswer) -> None:
        """Keep `answer` to `call`, atomically (a reader sees the old file or the new one)."""
        path = self.path(call)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in asdict(answer).items() if k != "cached"}
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(data, handle, ensure_ascii=False)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


def _fields(data: Any) -> dict[str, Any]:
    """The answer's fields from a cache file, checked (a wrong type is a miss)."""
    if not isinstance(data, dict):
        raise ValueError("not an object")
    texts = ("text", "model", "finish", "refusal")
    for name in texts:
        if name not in data or not isinstance(data[name], str | None):
            raise ValueError(f"{name} is missing or not text")
    attempts = data.get("attempts", 1)
    if not isinstance(attempts, int) or isinstance(attempts, bool):
        raise ValueError("attempts is not a number")
    return {name: data[name] for name in texts} | {"attempts": attempts}


def default_cache() -> JudgeCache | None:
    """The cache ``ORACLE_JUDGE_CACHE`` names (None when it says ``off``), else the user's."""
    named = os.environ.get(CACHE_ENV)
    if named is not None:
        if named.strip().lower() in DISABLED:
            return None
        return JudgeCache(Path(named).expanduser())
    return JudgeCache(user_cache_dir() / "judge")
