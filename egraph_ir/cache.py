"""The project's one cache folder: what is measured on this machine (the roofline's
machine.json, kernel timings, placement costs) and egc's compile cache live under it.

platformdirs' user cache directory for "egraph-compiler": `$XDG_CACHE_HOME/egraph-compiler`
on Linux (default `~/.cache/egraph-compiler`). egc/compile_cache.py computes the same path
without importing the compiler (a cache hit must stay fast); a test checks they agree.
"""

from __future__ import annotations

from pathlib import Path

APP = "egraph-compiler"


def cache_root() -> Path:
    """The cache folder (not created here: writers create what they write)."""
    import platformdirs

    return platformdirs.user_cache_path(APP)
