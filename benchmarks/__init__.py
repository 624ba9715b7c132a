"""Measured comparisons, run by hand (`make bench`); never timed assertions in tests."""
