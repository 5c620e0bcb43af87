"""The weight-step flags that `bin/search-lm` and `bin/train-lm` share (decay, clipping, the five dropouts)."""

from __future__ import annotations

from typing import Any, Callable

import click

from nas.runs.config import flag_name


HELP = {
    "wdecay": "SGD weight decay.",
    "clip": "Gradient norm clipping.",
    "dropout": "Locked dropout on the layer output.",
    "dropouth": "Variational dropout on h inside the cell (lstm: DropConnect on the hidden weights).",
    "dropoutx": "Variational dropout on x inside the cell (lstm: on the layer input).",
    "dropouti": "Locked dropout on the embeddings.",
    "dropoute": "Embedding-row dropout.",
}


def weight_step_options(defaults: Any, types: dict[str, click.ParamType]) -> Callable:
    """Decorate a command with --wdecay, --clip and the dropouts, their defaults from the config `defaults`
    and their flag names from `nas.runs.config` (which names them in its errors too)."""
    options = [
        click.option(flag_name(name), name, type=types[name], default=getattr(defaults, name), help=text)
        for name, text in HELP.items()
    ]

    def decorate(command: Callable) -> Callable:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
