"""What the commands share on the command line (click only): `--config RUN_DIR/config.json`, which
reruns a run from its saved settings, as `spacy train config.cfg` does.

The settings in the file become the defaults of the command's flags (click's `default_map`), so a
flag given on the command line wins over the file. A key is a flag's parameter name (the
dataclass field a run's config.json is written from) unless the command renames it; keys that
name no flag (the command line, resolved values such as a genotype) are left to the command,
which finds the whole file in `loaded_config()`.

Light on purpose (click and json only): `--help` and a bad file answer at once.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping

import click

META_KEY = "config_file"


def config_option(renames: Mapping[str, str | None] | None = None) -> Callable:
    """The `--config FILE` option; `renames` maps a config key to the parameter it fills (None: to none)."""
    renames = dict(renames or {})

    def load(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        stored = _read(value, ctx, param)
        params = {p.name: p for p in ctx.command.params if p.name != param.name}
        defaults = {}
        for key, setting in stored.items():
            name = renames.get(key, key)
            target = params.get(name) if name is not None else None
            if target is None or setting is None or isinstance(setting, (dict, list)):
                continue
            defaults[name] = str(setting) if isinstance(target.type, click.Choice) else setting
        ctx.default_map = {**(ctx.default_map or {}), **defaults}
        ctx.meta[META_KEY] = stored
        return value

    return click.option("--config", type=click.Path(dir_okay=False), is_eager=True, expose_value=False,
                        callback=load, help="A run's config.json: its settings are the defaults of every flag "
                                            "(flags given here win); the run goes into a new --run-dir.")


def loaded_config() -> dict[str, Any]:
    """The whole file given to --config ({} without one): the keys that fill no flag."""
    return click.get_current_context().meta.get(META_KEY, {})


def not_from_config(values: dict[str, Any]) -> dict[str, Any]:
    """`values` (by parameter name) less those the --config file filled: a check of how flags fit
    together (e.g. a method's own flags) judges what was typed, not what a run of another kind stored."""
    ctx = click.get_current_context()
    return {k: v for k, v in values.items() if ctx.get_parameter_source(k) != click.core.ParameterSource.DEFAULT_MAP}


def _read(value: str, ctx: click.Context, param: click.Parameter) -> dict:
    try:
        with open(value, encoding="utf-8") as handle:
            stored = json.load(handle)
    except OSError as err:
        raise click.BadParameter(f"{value}: {err.strerror}", ctx, param) from None
    except UnicodeDecodeError as err:
        raise click.BadParameter(f"{value}: not UTF-8 text (byte {err.start})", ctx, param) from None
    except json.JSONDecodeError as err:
        raise click.BadParameter(f"{value}: line {err.lineno}: invalid JSON ({err.msg})", ctx, param) from None
    if not isinstance(stored, dict):
        raise click.BadParameter(f"{value}: not a run's config.json (a JSON object of settings)", ctx, param)
    return stored
