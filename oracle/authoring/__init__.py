"""What a task author declares and how it is loaded: `Task` with its scopes, injections and
controls, resource limits, loading task files by path, `oracle check`, the controls status
stored beside a task file, and the digest of a task's code.
"""
