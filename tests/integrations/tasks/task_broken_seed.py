"""A task whose sandbox cannot be prepared: its seed is not SQL."""

from oracle import Task, sqlite


def anything(ev):
    return bool(ev.diff.sql("db"))


task = Task(
    name="broken-seed",
    prompt="This sandbox never opens.",
    sinks=[sqlite("db", sql="THIS IS NOT SQL")],
    utility=anything,
    security=anything,
)
