"""Defaults from a dict for the commands: an option whose value names a set of flag values.

`--preset NAME` (and, by the same mechanism, any option that loads stored settings) is an eager
click option: before the other flags are read, its callback puts the named values into the
command's `default_map`. click then takes a flag's value from the command line if given there,
else from that map, else its own default, so a flag given still wins, the command body sees the
resolved values (and writes them to its config.json), and `ctx.get_parameter_source(name)` tells
DEFAULT_MAP apart from COMMANDLINE. A support module for the commands, so it imports click.
"""
from __future__ import annotations

from typing import Any, Callable

import click



def defaults_option(*param_decls: str, lookup: Callable[[str], dict[str, Any]], **attrs: Any) -> Callable:
    """A click option whose value `v` sets the defaults `lookup(v)` ({parameter name: value}) of the
    command's other flags."""

    def fill(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        values = lookup(value)  # an InputError becomes the usual one line (common.cli.Command)
        unknown = sorted(set(values) - {p.name for p in ctx.command.params})
        if unknown:
            raise ValueError(f"{param.opts[0]} {value}: {ctx.info_name} has no option {', '.join(unknown)}")
        ctx.default_map = {**(ctx.default_map or {}), **values}
        return value

    return click.option(*param_decls, callback=fill, is_eager=True, **attrs)
