"""``python -m oracle.cli``: the `oracle` command, as before the CLI became a package."""

from oracle.cli.app import main

if __name__ == "__main__":  # not when a worker process imports it
    main()
