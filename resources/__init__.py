"""The shipped cells and character LMs, installed as the package `nas_resources` (see common.resources)."""
