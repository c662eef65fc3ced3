"""The `egc` command line: argument parsing and dispatch (main.py), the commands behind
it (commands.py; `egc run` and `egc tune` in run.py), argument types and the typed
compile request built from them (args.py), printing of values and tables (values.py).
Nothing below this package reads argparse."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
