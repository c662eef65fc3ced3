"""rules: optimisation rules declared as data in `*.rules` files (layer 1; imports egraph_ir)."""
