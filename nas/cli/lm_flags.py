"""The weight-step flags that `bin/search-lm` and `bin/train-lm` share (decay, clipping, the five dropouts)."""
from __future__ import annotations

from typing import Any, Callable

import click


def weight_step_options(defaults: Any, types: dict[str, click.ParamType]) -> Callable:
    """Decorate a command with --wdecay, --clip and the dropouts, their defaults from the config `defaults`."""
    options = [
        click.option("--wdecay", type=types["wdecay"], default=defaults.wdecay, help="SGD weight decay."),
        click.option("--clip", type=types["clip"], default=defaults.clip, help="Gradient norm clipping."),
        click.option("--dropout", type=types["dropout"], default=defaults.dropout, help="Locked dropout on the layer output."),
        click.option("--dropout-h", "dropouth", type=types["dropouth"], default=defaults.dropouth,
                     help="Variational dropout on h inside the cell (lstm: DropConnect on the hidden weights)."),
        click.option("--dropout-x", "dropoutx", type=types["dropoutx"], default=defaults.dropoutx,
                     help="Variational dropout on x inside the cell (lstm: on the layer input)."),
        click.option("--dropout-i", "dropouti", type=types["dropouti"], default=defaults.dropouti,
                     help="Locked dropout on the embeddings."),
        click.option("--dropout-e", "dropoute", type=types["dropoute"], default=defaults.dropoute, help="Embedding-row dropout."),
    ]

    def decorate(command: Callable) -> Callable:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
