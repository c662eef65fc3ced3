"""Every pass name defined so far, so that a typo in a pass list is an error, not a no-op."""

from __future__ import annotations

from collections.abc import Sequence

from egraph_ir.errors import ConfigError, did_you_mean

PASS_NAMES: set[str] = set()  # every pass name defined so far (classes, PassInfos, registry)


def check_pass_names(what: str, names: Sequence[str]) -> None:
    """A name in required_pass / disabled_pass (or --disable) that no pass has is a typo:
    an error with a did-you-mean, rather than a setting that silently does nothing."""
    for name in names:
        if name not in PASS_NAMES:
            raise ConfigError(
                f"{what}: unknown pass '{name}'{did_you_mean(name, PASS_NAMES)}; "
                f"known: {', '.join(sorted(n for n in PASS_NAMES if not n.startswith('_')))}"
            )
