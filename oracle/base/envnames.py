"""The names of a sandbox's environment variables, shared by the harness that sets them and the
clients and agents that read them (which should not have to import the evidence layer to)."""

from __future__ import annotations


def env_suffix(name: str) -> str:
    """``'shop-db'`` → ``'SHOP_DB'``: the suffix of a sink's environment variables.

    >>> env_suffix("shop-db")
    'SHOP_DB'
    """
    return "".join(ch if ch.isalnum() else "_" for ch in name).upper()
