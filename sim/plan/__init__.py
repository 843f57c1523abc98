"""Planning a sweep: grid expansion and its axes, bounds, the branch-and-bound planner, executors and the row cache."""
