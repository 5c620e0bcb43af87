"""`bin/train-charlm`: a forward or backward character LM for Flair embeddings, offline."""
from __future__ import annotations

import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

import click

from common.errors import InputError, cli_errors


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--corpus", required=True, type=click.Path(), help="A text file, or a directory with train/valid/test splits (e.g. ../shared/data/wikitext-2).")
@click.option("--direction", type=click.Choice(["forward", "backward"]), required=True)
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output directory; the model is OUT/best-lm.pt.")
@click.option("--hidden", type=int, default=256, help="LSTM hidden size (256 keeps the file under 5 MB).")
@click.option("--embedding", type=int, default=100, help="Character embedding size.")
@click.option("--epochs", type=int, default=None, help="Passes over the train splits.")
@click.option("--time-budget", type=float, default=None, help="Minutes; training stops then and keeps the best model so far.")
@click.option("--seq-len", type=int, default=250, help="Characters per truncated-BPTT sequence (flair's default).")
@click.option("--batch-size", type=int, default=100)
@click.option("--lr", type=float, default=20.0, help="SGD learning rate (flair's default).")
@click.option("--split-chars", type=int, default=2_000_000, help="Characters per train split; flair validates and keeps the best model after each.")
@click.option("--seed", type=int, default=1)
@click.option("--device", default="cpu")
@cli_errors
def main(corpus, direction, out, hidden, embedding, epochs, time_budget, seq_len, batch_size, lr, split_chars, seed,
         device) -> None:
    """Train a character language model with flair's LanguageModelTrainer, offline.

    The .pt plugs into `bin/train-tagger --embeddings flair:FWD.pt:BWD.pt` (or pooled-flair:).

        bin/train-charlm --corpus ../shared/data/wikitext-2 --direction forward --out charlm-fwd --time-budget 20
    """
    from common.files import atomic_write_json

    from ..charlm import train_charlm

    if epochs is None and time_budget is None:
        raise InputError("give --epochs N or --time-budget MIN")
    if hidden < 1 or (epochs is not None and epochs < 1) or (time_budget is not None and time_budget <= 0):
        raise InputError("--hidden and --epochs must be at least 1, --time-budget above 0")
    result = train_charlm(corpus, out, direction, hidden, embedding, epochs, time_budget, seq_len, batch_size, lr,
                          seed, device, split_chars)
    provenance = {"command": " ".join(shlex.quote(a) for a in ["bin/train-charlm", *sys.argv[1:]]),
                  "corpus": str(Path(corpus)), "direction": direction, "hidden": hidden, "epochs": epochs,
                  "time_budget_min": time_budget, **result,
                  "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    atomic_write_json(Path(out) / "provenance.json", provenance)
    click.echo(f"{Path(out) / 'best-lm.pt'}: validation {result['valid_bpc']:.3f} bits per character, "
               f"{result['size_bytes'] / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
