"""Every pass name defined so far, so that a typo in a pass list is an error, not a no-op."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from egraph_ir.errors import ConfigError, did_you_mean

PASS_NAMES: set[str] = set()  # every pass name defined so far (classes, PassInfos, registry)


class UnknownPassWarning(UserWarning):
    """disabled_pass names a pass this compiler does not have (a TVM name such as
    AlterOpLayout, or a typo): accepted, as TVM accepts it, and it disables nothing."""


def check_pass_names(what: str, names: Sequence[str], warn: bool = False) -> None:
    """A name in required_pass (or --disable) that no pass has is a typo: an error with a
    did-you-mean, rather than a setting that silently does nothing. With `warn` (a
    context's disabled_pass, which TVM code fills with its own pass names) a warning."""
    for name in names:
        if name not in PASS_NAMES:
            known = ", ".join(sorted(n for n in PASS_NAMES if not n.startswith("_")))
            message = f"{what}: unknown pass '{name}'{did_you_mean(name, PASS_NAMES)}"
            if warn:
                warnings.warn(
                    f"{message}; disabling it does nothing", UnknownPassWarning, stacklevel=3
                )
                continue
            raise ConfigError(f"{message}; known: {known}")
