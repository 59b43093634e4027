"""AgentDojo's own checks as oracle evaluators, each classified by the evidence it reads.

A user task's ``utility`` and an injection task's ``security`` read the model's final text,
the environment before and after, and (where a task overrides ``utility_from_traces`` /
``security_from_traces``) the tool-call trace. Their source says which: a check is

- *claim* tier when its body reads ``model_output`` (the agent's final text: its own account,
  which may not decide a verdict; DESIGN §3) and the task captures no reply;
- *boundary* tier when it reads ``model_output`` and the task has a reply sink: the check is
  handed the reply the harness captured (what the agent published, not its account of itself);
  on a trial where the harness captured none, it is claim tier again and the metric unknown;
- *harness* tier when it decides from the trace (issuing a call is not landing an effect);
- *environment* tier when it reads only the environments.

Environment- and boundary-tier checks decide a verdict here. The others are *unsupported*: the
metric stays unknown with the reason, and `oracle controls` lists them as such.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from oracle.evidence.diff import IncompleteEvidenceError, UnknownSinkError
from oracle.evidence.evidence import Evidence
from oracle.judging.evaluators import PredicateResult, combine, run_predicate
from oracle.judging.verdict import DECIDING_TIERS, EvaluatorKind, Outcome
from oracle.sinks.reply import REPLY

Tier = Literal["environment", "boundary", "harness", "claim"]
_WEAKEST: tuple[Tier, ...] = ("claim", "harness", "boundary", "environment")


def _reads(fn: Callable[..., Any], name: str) -> bool:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return True  # cannot tell: assume the worst
    body = tree.body[0]
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(body))


def _may_return_none(fn: Callable[..., Any]) -> bool:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return True
    return any(
        isinstance(n, ast.Return)
        and (n.value is None or (isinstance(n.value, ast.Constant) and n.value.value is None))
        for n in ast.walk(tree.body[0])
    )


_CLASSIFIED: dict[tuple[Any, str, bool], tuple[Tier, str]] = {}


def classify(
    task_cls: Any, check: str, traces: str, base: Any, *, reply: bool = False
) -> tuple[Tier, str]:
    """The tier of `check` (``utility``/``security``) of an AgentDojo task class, and why.
    With `reply` (the task captures the agent's reply), reading the final text is boundary tier."""
    key = (task_cls, check, reply)
    if key not in _CLASSIFIED:
        _CLASSIFIED[key] = _classify(task_cls, check, traces, base, reply)
    return _CLASSIFIED[key]


def combined_parts(task_cls: Any, traces: str, base: Any) -> tuple[Any, Any] | None:
    """The two tasks a combined user task (AgentDojo's ``TaskCombinator``) runs, or None.
    Its ``utility_from_traces`` hands the trace to both and, where both give None, AgentDojo
    falls back to its ``utility``, which runs the two tasks' own checks."""
    fn = getattr(task_cls, traces, None)
    if not callable(fn):
        return None
    try:
        found = inspect.getclosurevars(fn).nonlocals
    except (TypeError, ValueError):
        return None
    parts = (found.get("user_task_1"), found.get("user_task_2"))
    if all(isinstance(p, base) for p in parts):
        return parts[0], parts[1]
    return None


def _classify(task_cls: Any, check: str, traces: str, base: Any, reply: bool) -> tuple[Tier, str]:
    parts = combined_parts(task_cls, traces, base)
    if parts is not None:
        # What AgentDojo runs for a combined task is what it runs for each of its parts.
        found = [(p.ID, *classify(type(p), check, traces, base, reply=reply)) for p in parts]
        weakest = next(t for t in _WEAKEST if any(f[1] == t for f in found))
        return weakest, "; ".join(f"{pid}: {why}" for pid, _, why in found if why)
    tiers: set[Tier] = set()
    reasons: list[str] = []
    text: Tier = "boundary" if reply else "claim"
    from_reply = ", taken from the reply the harness captured" if reply else ""
    main = getattr(task_cls, check)
    from_traces = getattr(task_cls, traces)
    uses_main = True
    if from_traces is not getattr(base, traces):
        if _reads(from_traces, "traces"):
            tiers.add("harness")
            reasons.append(f"{traces} reads the tool-call trace")
        if _reads(from_traces, "model_output"):
            tiers.add(text)
            reasons.append(f"{traces} reads the model's final text{from_reply}")
        if _reads(from_traces, "pre_environment") or _reads(from_traces, "post_environment"):
            tiers.add("environment")
        uses_main = _may_return_none(from_traces)
    if uses_main:
        if _reads(main, "model_output"):
            tiers.add(text)
            reasons.append(f"{check} reads the model's final text{from_reply}")
        tiers.add("environment")
    weakest = next(t for t in _WEAKEST if t in tiers)
    return weakest, "; ".join(reasons)


@dataclass
class AgentDojoCheck:
    """One AgentDojo check as the evaluator of one metric.

    `fn(model_output, pre, post)` calls the check on the environments rebuilt from the before
    and after snapshots of sink `sink`. A boundary-tier check gets the text of the reply that
    reply sink `reply` captured as ``model_output``; the others get ``""`` (they do not read
    it). Only environment- and boundary-tier checks decide; the others are unsupported.
    """

    name: str
    fn: Callable[[str, Any, Any], Any]
    tier: Tier
    why: str
    sink: str
    combine_how: Literal["any", "all"]
    reply: str | None = None

    def __post_init__(self) -> None:
        if self.tier == "boundary" and self.reply is None:
            raise ValueError(f"AgentDojo check {self.name!r}: a boundary-tier check needs a reply")

    @property
    def kind(self) -> EvaluatorKind:
        return "predicate" if self.decides else "unconfigured"

    @property
    def decides(self) -> bool:
        return self.tier in DECIDING_TIERS

    def names(self) -> list[str]:
        return [self.name]

    def unsupported(self) -> dict[str, str]:
        """Why this check cannot decide a verdict (empty when it can)."""
        if self.decides:
            return {}
        return {self.name: f"{self.tier} tier: {self.why}; it may not decide a verdict"}

    def _final_text(self, ev: Evidence) -> str:
        if self.tier != "boundary":
            return ""
        reply = ev.boundary.of(REPLY, self.reply)
        cut = reply.unseen()
        if cut:
            raise IncompleteEvidenceError(f"the check reads the whole reply: {cut}")
        return reply.text

    def _predicate(self, ev: Evidence) -> bool:
        model_output = self._final_text(ev)
        pre = ev.before[self.sink].state.environment()
        post = ev.after[self.sink].state.environment()
        # AgentDojo's checks work on copies: they must not change what the next one sees.
        value = self.fn(model_output, pre.model_copy(deep=True), post.model_copy(deep=True))
        if type(value) is not bool:
            # AgentDojo itself reads results as truthy; here a None or a number is a broken
            # check, never a quiet False (DESIGN §5).
            raise TypeError(f"AgentDojo check {self.name!r} returned {value!r}, not a bool")
        return value

    def _no_reply(self, ev: Evidence) -> str | None:
        """Why a boundary-tier check is claim tier on this trial: no reply was captured."""
        if self.tier != "boundary":
            return None
        try:
            captured = ev.fresh().boundary.of(REPLY, self.reply).captured
        except UnknownSinkError:  # not observed: the trial's observation failed, and says so
            return None
        if captured:
            return None
        return (
            f"claim tier: {self.name} reads the model's final text and the harness captured no "
            f"reply (sink {self.reply!r}); it may not decide a verdict"
        )

    def _unknown(
        self, why: str, tier: Tier, kind: EvaluatorKind
    ) -> tuple[Outcome, list[PredicateResult]]:
        return Outcome(None, kind, why), [PredicateResult(self.name, None, why, frozenset({tier}))]

    def evaluate(self, evidence: Evidence) -> tuple[Outcome, list[PredicateResult]]:
        if not self.decides:
            return self._unknown(self.unsupported()[self.name], self.tier, self.kind)
        no_reply = self._no_reply(evidence)
        if no_reply is not None:
            return self._unknown(no_reply, "claim", "predicate")
        result = run_predicate(self.name, self._predicate, evidence)
        return combine([result], self.combine_how), [result]
