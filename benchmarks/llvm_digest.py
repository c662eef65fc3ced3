"""The generated LLVM text of the built-in and the real models, for checking that a
refactoring of the back end changed no code: save the texts before, compare after.

    .venv/bin/python benchmarks/llvm_digest.py --save /tmp/before   # on the old commit
    .venv/bin/python benchmarks/llvm_digest.py --compare /tmp/before  # on the new one

Each model is built at opt levels 2 and 3 and its text (`Executable.get_source()`, before
LLVM's optimiser) digested; the real models come from ../shared/models/real where that
folder exists. Run both sides on the same machine: kernel choices follow the CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "models" / "real"


def cases() -> list[tuple[str, Any]]:
    from egraph_ir import models

    found: list[tuple[str, Any]] = [(name, models.get(name)) for name in models.NAMES]
    return found + [(p.stem, str(p)) for p in sorted(REAL.glob("*.onnx"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="write each text into this folder")
    parser.add_argument("--compare", type=Path, help="compare each text with this folder's")
    args = parser.parse_args()
    import codegen
    import passmgr as pm

    differ = []
    for name, model in cases():
        for level in (2, 3):
            with pm.PassContext(opt_level=level):
                text = codegen.build(model).get_source()
            file = f"{name}_O{level}.ll"
            digest = hashlib.sha256(text.encode()).hexdigest()[:12]
            same = ""
            if args.compare is not None:
                old = args.compare / file
                same = "same" if old.exists() and old.read_text() == text else "DIFFERENT"
                if same != "same":
                    differ.append(file)
            print(f"{name:>16} O{level} {digest} {same}", flush=True)
            if args.save is not None:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / file).write_text(text)
    if differ:
        print(f"{len(differ)} text(s) differ: {', '.join(differ)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
