#!/usr/bin/env python3
"""How fast a tagger learns, and why: dev F1 through training, gradient norm per layer, the scale
of the recurrent layer's output at initialisation. Built for issue 19's question of why a searched
cell learns more slowly than flair's LSTM at equal parameters.

Each run builds the tagger exactly as `bin/train-tagger` does (`tagger.train.build_model`; `lstm`
is flair's BiLSTM at --hidden-size, a cell gets the hidden size at which its recurrent layer has
that LSTM's parameter count, as `--match-params lstm:H` sizes it) and trains it with the step of
flair's `ModelTrainer`: shuffled mini-batches, the CRF loss summed over the batch, gradient
clipping of the whole model's norm at --clip, SGD at --lr. No annealing: the runs are short.
Every 1/--evals-per-epoch of an epoch it scores dev F1 (strict IOB2 spans) and the mean
pre-clipping gradient norm of each of the model's layers (reprojection `embedding2nn`, `rnn`,
`linear`, the CRF) and of the whole model.

Variants: `--cell-init lstm|darts` (train-tagger's: ±1/√hidden, the
default, or DARTS's ±0.04), `--init-range R` (re-draws the cell's weights uniform in ±R after
that), `--lr`, `--clip`, `--no-reproject`. Prints one JSON line per run. The table "Why the
searched cell learned more slowly" in docs/results.md comes from runs of this script.

    bench/tagger_learning.py --corpus conll2000 --data data/conll2000 --cell darts_v2 --hidden-size 128 --epochs 2
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from dataclasses import replace

from harness import report, train_tagger_epoch

import torch  # noqa: E402  (after harness, which sets sys.path)

from nas.cells.genotype import load  # noqa: E402
from tagger.config import CELL_INITS, TaggerConfig  # noqa: E402
from tagger.corpora import load_corpus, to_sentences  # noqa: E402
from tagger.embeddings import build_embeddings  # noqa: E402
from tagger.evaluation import evaluate  # noqa: E402
from tagger.sizing import match_layer  # noqa: E402
from tagger.train import build_model  # noqa: E402

LAYERS = ("embedding2nn", "rnn", "linear", "crf")


def layer_norms(model) -> dict[str, float]:
    """The gradient norm of each layer (before clipping; the whole model's is the one clipping returns)."""
    norms = {}
    for name in LAYERS:
        grads = (
            [p.grad for p in getattr(model, name).parameters() if p.grad is not None] if hasattr(model, name) else []
        )
        norms[name] = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))) if grads else 0.0
    return norms


def output_scale(model, sentences: list) -> dict[str, float]:
    """The recurrent layer's output over the sentences, untrained, in eval mode: mean |h| and the
    mean over features of the std over tokens (the part that depends on the input)."""
    seen = []
    hook = model.rnn.register_forward_hook(lambda mod, inp, out: seen.append(out[0].data.detach()))
    model.eval()
    with torch.inference_mode():
        model.predict(sentences, mini_batch_size=64, label_name="scale-probe")
    hook.remove()
    out = torch.cat(seen)
    return {"mean_abs": float(out.abs().mean()), "token_std": float(out.std(0).mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="conll2000")
    parser.add_argument("--data", required=True)
    parser.add_argument("--embeddings", default="glove:glove-6b-50d")
    parser.add_argument("--cell", default="darts_v2", help="a shipped cell, a genotype file, or lstm")
    parser.add_argument("--hidden-size", type=int, default=128, help="the LSTM's; a cell is matched to its parameters")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--evals-per-epoch", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--clip", type=float, default=5.0)
    parser.add_argument("--cell-init", choices=CELL_INITS, default=TaggerConfig.cell_init)
    parser.add_argument("--init-range", type=float, help="re-draw the cell's weights uniform in ±R")
    parser.add_argument("--no-reproject", action="store_true")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-train", type=int, default=None, help="use the first N training sentences")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from tagger.cli.runtime import flair_logs_to_stderr

    flair_logs_to_stderr(logging.WARNING)
    corpus = load_corpus(args.corpus, args.data)
    embeddings = build_embeddings(args.embeddings)
    train = to_sentences(corpus.train, corpus.tag_type)[: args.max_train]
    dev = to_sentences(corpus.dev, corpus.tag_type)
    config = TaggerConfig(hidden_size=args.hidden_size, reproject=not args.no_reproject, cell_init=args.cell_init)
    genotype = None if args.cell == "lstm" else load(args.cell)
    hidden = (
        args.hidden_size
        if genotype is None
        else match_layer(genotype, "lstm", None, args.hidden_size, embeddings.embedding_length).hidden_size
    )
    torch.manual_seed(args.seed)
    model = build_model(replace(config, hidden_size=hidden), corpus, embeddings, genotype)
    if args.init_range is not None and genotype is not None:
        for weight in (model.rnn.cell.w0, model.rnn.cell.ws):
            torch.nn.init.uniform_(weight, -args.init_range, args.init_range)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    record = {
        "bench": "tagger_learning",
        **{k: v for k, v in vars(args).items() if k != "data"},
        "hidden": hidden,
        "rnn_parameters": sum(p.numel() for p in model.rnn.parameters()),
        "init_output": output_scale(model, dev),
        "dev_f1": [],
        "grad_norms": [],
        "clipped_fraction": [],
    }
    batches = -(-len(train) // args.batch_size)
    every = max(1, batches // args.evals_per_epoch)
    rng = random.Random(args.seed)
    interval = {"sums": dict.fromkeys((*LAYERS, "total"), 0.0), "steps": 0, "clipped": 0}

    def add_layer_norms() -> None:
        for name, value in layer_norms(model).items():
            interval["sums"][name] += value

    def after_step(b: int, norm: float) -> None:
        interval["sums"]["total"] += norm
        interval["clipped"] += int(norm > args.clip)
        interval["steps"] += 1
        if b % every == 0 or b == batches:
            steps = interval["steps"]
            f1 = evaluate(model, dev, corpus.dev.tags)[0]["f1"]
            record["dev_f1"].append([round(epoch + b / batches, 3), round(100 * f1, 2)])
            record["grad_norms"].append({k: round(v / steps, 3) for k, v in interval["sums"].items()})
            record["clipped_fraction"].append(round(interval["clipped"] / steps, 3))
            interval.update(sums=dict.fromkeys(interval["sums"], 0.0), steps=0, clipped=0)

    start = time.perf_counter()
    for epoch in range(args.epochs):
        train_tagger_epoch(model, train, args.batch_size, optimizer, rng, args.clip, add_layer_norms, after_step)
    record["seconds"] = round(time.perf_counter() - start, 1)
    report(record)


if __name__ == "__main__":
    main()
