"""An LLM judge over the agent's attributed output (docs/judge.md).

- `spec`: the `Judge` a task declares among a metric's predicates, its labelled `Example`\\ s,
  and the prompt built from the evidence in the sealed scorer;
- `parse`: the strict reading of the model's answer;
- `backends`: the models (OpenAI-compatible, Anthropic, Inspect AI), retries and the cache;
- `run`: asking the model for a prepared prompt, in the oracle's process;
- `calibration`: how well the controls and examples say the judge agrees with known answers.
"""

from oracle.judging.llm.spec import Example, Judge

__all__ = ["Example", "Judge"]
