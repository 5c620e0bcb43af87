"""`bin/compare-words`: which words one language model predicts better than another (ESS Table 3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from nas.common.cli import BATCH_SIZE, COUNT, DEVICE, THREAD_COUNT, command, require_stdout, use_threads
from nas.common.splits import find_splits

if TYPE_CHECKING:
    from nas.runs.wordloss import WordRow


@command()
@click.argument("model_a", type=click.Path())
@click.argument("model_b", type=click.Path())
@click.option("--data", required=True, type=click.Path(), help="Corpus directory; its validation split is evaluated.")
@click.option(
    "--split", type=click.Choice(["valid", "test"]), default="valid", help="Which split of --data to evaluate."
)
@click.option("--top", type=COUNT, default=8, help="Words listed in each table.")
@click.option(
    "--min-count", type=COUNT, default=5, help="Only words seen at least this often in the split enter the Δ table."
)
@click.option(
    "--batch-size", type=BATCH_SIZE, default=10, help="Evaluation batch size (hidden state carried across bptt chunks)."
)
@click.option("--device", type=DEVICE, default="cpu")
@click.option("--threads", type=THREAD_COUNT, default=None, help="CPU threads for torch [default: torch's choice].")
def main(model_a, model_b, data, split, top, min_count, batch_size, device, threads) -> None:
    """Per-word loss difference of MODEL_B against MODEL_A on the validation data.

    MODEL_A and MODEL_B are language models: `bin/train-lm` run directories (their best.pt, or
    checkpoint.pt before the first epoch ends) or model files, or `bin/search-lm` run directories
    (the search model at its last checkpoint). Δ is the mean NLL of MODEL_B minus that of MODEL_A
    per occurrence of the word (negative: B is better), e.g. for ESS Table 3, the retrained
    intra-only and joint cells: `bin/compare-words runs/intra-lm runs/joint-lm --data data/ptb`.
    """
    from nas.common.stats import ppl
    from nas.runs.wordloss import compare_words, largest_differences, load_language_model, most_frequent
    from .terminal import TokenProgress

    require_stdout("the comparison")
    use_threads(threads)
    path = find_splits(data)[split]
    a, b = load_language_model(model_a, device), load_language_model(model_b, device)
    shown: list[TokenProgress] = []

    def progress(label: str, steps: int, columns: int):
        shown.append(TokenProgress(label, steps, columns))
        return shown[-1].tokens_done

    rows, mean_a, mean_b = compare_words(a, b, path, batch_size, progress)
    for bar in shown:
        bar.clear()
    click.echo(
        f"# {path}: mean NLL A {mean_a:.4f} (ppl {ppl(mean_a):.1f}), B {mean_b:.4f} (ppl {ppl(mean_b):.1f}); "
        f"delta = loss B - loss A per occurrence (negative: B better)"
    )
    click.echo(f"# A = {a.source}\n# B = {b.source}")
    click.echo(f"\n## largest |delta| (count >= {min_count})")
    _table(largest_differences(rows, top, min_count))
    click.echo("\n## most frequent words")
    _table(most_frequent(rows, top))


def _table(rows: list[WordRow]) -> None:
    click.echo("word\tcount\ttrain_count\tloss_a\tloss_b\tdelta")
    for r in rows:
        click.echo(
            f"{r.word}\t{r.count}\t{'' if r.train_count is None else r.train_count}\t"
            f"{r.loss_a:.3f}\t{r.loss_b:.3f}\t{r.delta:+.3f}"
        )


if __name__ == "__main__":
    main()
