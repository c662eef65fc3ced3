"""Placing regions on targets (PlaceTargets): the cost model (model.py), the exact solver
(solve.py), placement by extraction (extract.py) or by measured runs (measured.py), and
the report (report.py); targets.py is the pass."""
