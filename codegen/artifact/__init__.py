"""Saved executables: the file format (load.py reads it, write.py writes it) and what a
load checks before trusting a file (check.py: digests, schema, signatures)."""
