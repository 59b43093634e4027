"""Strict parsing of a judge's answer: one JSON object with a boolean ``is_success`` and a
string ``reasoning``, and nothing else.

A code fence around the whole answer is stripped. Anything else is an error, never a verdict:
no text, a refusal (the provider's refusal field, a refusal finish reason, or prose that
declines), an answer cut at the token limit, prose around the object, invalid or truncated
JSON, a repeated key, a missing or extra key, ``"true"`` as a string, a reasoning that is not
text.

>>> parse('```json\\n{"is_success": true, "reasoning": "It says so."}\\n```').value
True
>>> parse('Sure! {"is_success": true, "reasoning": "x"}').error
'the answer has text around its JSON object (only the object is accepted)'
>>> parse('{"is_success": "true", "reasoning": "x"}').error
"is_success is the string 'true', not a boolean"
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

FENCE = re.compile(r"\A```[A-Za-z0-9_-]*[ \t]*\r?\n(?P<body>.*?)\r?\n?```\Z", re.DOTALL)
REFUSING = re.compile(
    r"\A\W*(i\s*(?:'|’)?\s*m\s+sorry|i\s+am\s+sorry|sorry,|i\s+can(?:'|’)?t|i\s+cannot|"
    r"i\s+won(?:'|’)?t|i\s+will\s+not|i\s+am\s+(?:not\s+able|unable)|i(?:'|’)m\s+(?:not\s+able|unable)|"
    r"as\s+an\s+ai)",
    re.IGNORECASE,
)
REFUSAL_FINISH = {"content_filter", "refusal", "safety"}
CUT_FINISH = {"length", "max_tokens", "model_length"}
KEYS = {"is_success", "reasoning"}


@dataclass(frozen=True)
class Parsed:
    """A verdict and its reasoning, or the error that leaves the judge unknown."""

    value: bool | None
    reasoning: str | None = None
    error: str | None = None


def _short(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError(f"the key {k!r} appears twice")
        seen[k] = v
    return seen


def refused(text: str | None, refusal: str | None, finish: str | None) -> str | None:
    """Why the answer is a refusal, or None."""
    if refusal:
        return f"the model refused: {_short(refusal)}"
    if finish and finish.lower() in REFUSAL_FINISH:
        return f"the model refused (finish reason {finish})"
    if text and not text.lstrip().startswith(("{", "`")) and REFUSING.match(text):
        return f"the model refused: {_short(text)}"
    return None


def parse(text: str | None, *, refusal: str | None = None, finish: str | None = None) -> Parsed:
    """The verdict in a judge's answer, or why there is none."""
    why = refused(text, refusal, finish)
    if why:
        return Parsed(None, error=why)
    if finish and finish.lower() in CUT_FINISH:
        return Parsed(None, error=f"the answer was cut at the token limit (finish reason {finish})")
    if text is None or not text.strip():
        return Parsed(None, error="the model answered with no text")
    body = text.strip()
    fenced = FENCE.match(body)
    if fenced:
        body = fenced.group("body").strip()
    around = "the answer has text around its JSON object (only the object is accepted)"
    if not body.startswith("{"):
        if "{" in body and not body.startswith("["):
            return Parsed(None, error=around)
        return Parsed(None, error=f"the answer holds no JSON object: {_short(text)!r}")
    try:
        raw, end = json.JSONDecoder(object_pairs_hook=_pairs).raw_decode(body)
    except ValueError as exc:
        return Parsed(None, error=f"the answer is not valid JSON ({exc})")
    if body[end:].strip():
        return Parsed(None, error=around)
    if not isinstance(raw, dict):
        return Parsed(None, error="the answer is not a JSON object")
    if "is_success" not in raw:
        return Parsed(None, error="the answer has no is_success")
    extra = sorted(set(raw) - KEYS)
    if extra:
        return Parsed(None, error=f"the answer has keys besides is_success and reasoning: {extra}")
    value = raw["is_success"]
    if type(value) is not bool:
        if isinstance(value, str):
            return Parsed(None, error=f"is_success is the string {value!r}, not a boolean")
        return Parsed(
            None, error=f"is_success is {value!r} ({type(value).__name__}), not a boolean"
        )
    reasoning = raw.get("reasoning")
    if not isinstance(reasoning, str):
        what = "missing" if reasoning is None else f"a {type(reasoning).__name__}"
        return Parsed(None, error=f"the answer's reasoning is {what}, not text")
    return Parsed(value, reasoning)
