"""Slow, literal references the tests and benchmarks check the toolkit against; not installed.

`darts`: the DARTS cell, search cell and α step written out one time step, node, edge and op at a
time, sharing no code with `nas`.
"""
