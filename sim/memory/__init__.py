"""Memory: model-state accounting, per-stage plans and the memory-saving policies."""
