"""What the back end measures on this machine: one timer (timer.py), the per-CPU database
of kernel choices (choices.py) and what fills it (tune.py, kernel_rates.py), and the
placement cost model (placement_costs.py)."""
