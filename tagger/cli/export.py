"""`bin/export`: write a saved tagger as one model file that flair's own API loads."""
from __future__ import annotations

import logging
from pathlib import Path

import click

from nas.common.cli import OUTPUT_FILE, command

from .runtime import flair_logs_to_stderr, offline


@command()
@click.argument("model", type=click.Path())
@click.option("--out", required=True, type=OUTPUT_FILE, help="The model file to write.")
def main(model, out) -> None:
    """Write the tagger of MODEL (a bin/train-tagger run directory or a model file, also one saved by
    an earlier version of this toolkit) as one flair model file, after loading it safely.

    An lstm tagger loads with flair alone; a tagger on a searched cell loads with flair's own
    loaders once this toolkit's tagger.model is imported (its class holds the cell). The file says
    what it needs under "requires" (flair's version; for a cell, this toolkit's and the genotype),
    and a model card in the Hugging Face shape is written beside it (OUT with suffix .md) from the
    run directory's config.json and metrics.json:

    \b
        bin/export runs/chunk-lstm --out chunker.pt
        python -c 'from flair.models import SequenceTagger; SequenceTagger.load("chunker.pt")'
        python -c 'import tagger.model; from flair.models import SequenceTagger; SequenceTagger.load("ner-darts.pt")'
    """
    offline()
    target = Path(out)  # OUTPUT_FILE refused a folder while the flags were parsed
    flair_logs_to_stderr(logging.WARNING)
    from .. import model_card
    from ..model import load_tagger

    card = model_card.export_path(target)
    tagger = load_tagger(model, "cpu")
    tagger.save(target)
    how = ("flair.models.SequenceTagger.load" if tagger.genotype is None
           else "flair.models.SequenceTagger.load after `import tagger.model` (its searched cell needs this toolkit)")
    click.echo(f"wrote {target}: load it with {how}", err=True)
    click.echo(f"wrote its model card {card}" if model_card.write_for_export(Path(model), target, card) else
               f"warning: no model card: {model} has no run directory of one seed beside it (config.json, "
               "metrics.json)", err=True)


if __name__ == "__main__":
    main()
