"""Stage 3 of the back end: from lowered kernels to a runnable plan: the execution graph
(graph.py), devices (devices.py), static memory (memory.py) and linking into native calls
over one slot table (link.py)."""
