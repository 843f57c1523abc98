"""One point of the grid: its config, the experiment it comes from, resolve and simulate, its stages and its result row."""
