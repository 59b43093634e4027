"""Integrations with other harnesses and benchmarks; each imports its optional dependency:

- `oracle.integrations.inspect`: Inspect AI solver wrapper and scorers (extra ``inspect``);
- `oracle.integrations.agentdojo`: AgentDojo suites as oracle tasks (extra ``agentdojo``).
"""
