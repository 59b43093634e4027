"""``python -m oracle.cli``: the `oracle` command, as before the CLI became a package."""

from oracle.cli.app import main

main()
