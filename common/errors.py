"""One error type for bad user input, and the CLI wrapper that turns it into one line and exit 2."""
from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


class InputError(Exception):
    """A problem with something the user gave us: a file, a flag value, a genotype."""


def cli_errors(func: F) -> F:
    """Run a click command body; InputError becomes `error: ...` on stderr and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except InputError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]
