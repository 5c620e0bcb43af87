"""The shipped cells and character LMs, installed as the data package `nas.resources` (see nas.common.resources)."""
