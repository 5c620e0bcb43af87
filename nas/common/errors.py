"""One error type for bad user input; `nas.common.cli.Command` turns it into one `error:` line and exit 2."""

from __future__ import annotations


class InputError(Exception):
    """A problem with something the user gave us: a file, a flag value, a genotype."""


class WriteRefused(InputError):
    """The file system refused a write (a full disk, a read-only mount); the file was left as it was."""
