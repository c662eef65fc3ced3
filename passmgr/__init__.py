"""passmgr: the PassContext-driven pass manager and the standard passes (layer 2)."""
