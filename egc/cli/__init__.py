"""The `egc` command line: argument parsing and dispatch (main.py), argument types
(args.py), printing of values and tables (values.py), and `egc run` (run.py)."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
