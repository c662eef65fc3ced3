"""Stage 3 of the back end: from lowered kernels to a runnable plan: the execution graph
(graph.py), devices (devices.py), static memory (memory.py), linking into native calls
over one slot table (link.py), and what lets one linked program serve every size of a
symbolic one (every_size.py)."""
