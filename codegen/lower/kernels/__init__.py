"""One module per native kernel: its NAME (the one string the chooser, the tuning
database, the cost model's rates, the profile and `--report` use), its fit test, its
layout and its loop-IR body. `codegen/lower/select.py` is the only place that picks one."""
