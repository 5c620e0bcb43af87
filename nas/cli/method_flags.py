"""The flags of the methods' own settings, made from the registered methods' settings dataclasses
(`nas.methods.settings`), and the settings a command's flags give the chosen method.

`bin/search-lm` and `bin/search-tagger` both take them. Each flag defaults to None, so that one
typed for another method is refused by name (`nas.methods.check_method_flags`); its help says the
method's default.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable

import click

from nas.common.cli import bounded
from nas.methods import METHODS, entry, method_setting_names
from nas.runs.config import flag_name


def method_setting_options(command: Callable) -> Callable:
    """Decorate a command with a flag for each setting of each registered method (a name two methods
    share is one flag)."""
    made = {}
    for e in METHODS.values():
        for f in () if e.settings.flat else fields(e.settings):  # flat ones: bin/search-lm's own flags
            if f.name not in made:
                made[f.name] = click.option(
                    flag_name(f.name),
                    f.name,
                    type=bounded(f.metadata["range"]),
                    default=None,
                    help=f"{f.metadata['help']} [default: {f.default}].",
                )
    for option in reversed(list(made.values())):
        command = option(command)
    return command


def take_method_settings(options: dict[str, Any]) -> dict[str, Any]:
    """Remove every method-setting flag from a command's `options`; returns them by name (None: not given)."""
    return {name: options.pop(name) for name in method_setting_names()}


def chosen_settings(method: str, given: dict[str, Any], stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """All settings of `method` as config.json stores them: `stored` (a --config file's, of the same
    method), then the flags `given` (not None), the rest at the method's defaults; checked, naming the flag."""
    settings = entry(method).settings
    if settings.flat:  # config fields, not `method_settings`
        return {}
    own = {f.name for f in fields(settings)}
    values = {**(stored or {}), **{k: v for k, v in given.items() if k in own and v is not None}}
    return settings.of(values).to_dict()
