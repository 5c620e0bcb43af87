"""Differentiable search of recurrent cells (DARTS, I-DARTS, ESS, NASABN) and their frozen form."""

__version__ = "0.1.0"
