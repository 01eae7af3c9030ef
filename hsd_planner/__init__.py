"""hsd_planner: profile drafters, solve for the latency-optimal hierarchy, validate it.

Depends on :mod:`hsd_runtime`, never the reverse.
"""
