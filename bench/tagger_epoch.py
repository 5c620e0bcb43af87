#!/usr/bin/env python3
"""Seconds per training epoch and sentences/s at prediction: our tagger (FrozenRNN, DARTS_V2)
against flair's `SequenceTagger` with its LSTM, same embeddings, hidden size and corpus.

The corpus is `tagger.synthetic` (CoNLL-2003 style, --sentences training sentences, a fifth as
many test sentences). With --match-params, flair's LSTM gets the hidden size at which its
recurrent layer has the cell layer's parameter count (`tagger.sizing`, as `bin/train-tagger --cell
lstm --match-params CELL` sizes it); otherwise both run at --hidden-size. The word vectors are a generated GloVe-style
file of random --dim vectors
for its vocabulary; `--charlm FWD.pt:BWD.pt` stacks Flair embeddings of a char LM pair on top
(e.g. resources/charlm/wt2-forward.pt:resources/charlm/wt2-backward.pt). Both taggers are built
by `tagger.train.build_model` exactly as `bin/train-tagger` builds them (`--cell lstm` is flair's
BiLSTM-CRF). Both train on the toolkit's CRF loss and reprojection (`tagger.crf`,
`tagger.reprojection`, `tagger.crf.PairDecoder`: flair's functions, computed faster), so the ratios
compare the recurrent layers; a third model, `flair_stock`, is flair's BiLSTM-CRF with flair's own
CRF module, `ViterbiLoss`, Viterbi decoder and reprojection (flair_lstm's weights and layer), for the
ratios against flair as shipped.

An epoch is the loop of flair's `ModelTrainer` without its logging and evaluation: shuffled
mini-batches of --batch-size, `forward_loss`, backward, gradient clipping at 5, SGD lr 0.1.
Prediction tags the test sentences under `torch.inference_mode`, --predict-repeats times after each
epoch: the two taggers of this toolkit as `bin/tag` and `bin/evaluate` run them
(`tagger.prediction.predict_entities`, flair's `predict` one batch at a time), `flair_stock` with one
call of flair's `predict` on the whole list, as flair's users call it. The models alternate epoch
by epoch, so load on a shared machine hits them alike.
Prints one JSON line of medians.

Our tagger runs on the backend `--backends` names (`nas.fast.backends`; `auto`: cpu-fused on a CPU,
cuda-graphs on a GPU), or on several, one model each, timed in the same interleaved loop.

    bench/tagger_epoch.py [--sentences 5000] [--hidden-size 256] [--match-params] [--repeats 3] [--predict-repeats 3]
    [--charlm FWD.pt:BWD.pt]
    bench/tagger_epoch.py --device cuda --match-params --backends cuda-graphs,cuda-loop
"""

from __future__ import annotations

import argparse
import logging
import random
import tempfile
from dataclasses import replace
from pathlib import Path

from harness import default_device, median, report, timed, train_tagger_epoch

import torch  # noqa: E402  (after common, which sets sys.path)

import nas.fast.backends as backends  # noqa: E402
from nas.cells.genotype import load  # noqa: E402
from tagger.config import SGD_LR, TaggerConfig  # noqa: E402
from tagger.corpora import load_corpus, to_sentences  # noqa: E402
from tagger.embeddings import build_embeddings  # noqa: E402
from tagger.prediction import LABEL, predict_entities  # noqa: E402
from tagger.sizing import match_layer, rnn_parameters  # noqa: E402
from tagger.synthetic import generate  # noqa: E402
from tagger.train import build_model  # noqa: E402
from flair.models.sequence_tagger_utils.crf import CRF  # noqa: E402
from flair.models.sequence_tagger_utils.viterbi import ViterbiDecoder, ViterbiLoss  # noqa: E402


def write_vectors(path: Path, words: set[str], dim: int, seed: int) -> None:
    """A GloVe-style text file (no header) of random vectors, one per word."""
    gen = torch.Generator().manual_seed(seed)
    vectors = torch.randn(len(words), dim, generator=gen) * 0.3
    with open(path, "w", encoding="utf-8") as out:
        for word, vector in zip(sorted(words), vectors.tolist()):
            out.write(word + " " + " ".join(f"{v:.5f}" for v in vector) + "\n")


def predict(model, sentences: list, batch_size: int, flairs_way: bool) -> None:
    """Tag the sentences as `bin/tag` and `bin/evaluate` do (`tagger.prediction.predict_entities`), or,
    `flairs_way`, with one call of flair's `predict` on the whole list, as a flair user does."""
    model.eval()
    with torch.inference_mode():
        if flairs_way:
            model.predict(sentences, mini_batch_size=batch_size, label_name=LABEL)
        else:
            predict_entities(model, sentences, batch_size)


def as_flair_ships(model) -> None:
    """Put flair's own CRF module, Viterbi loss and decoder and plain reprojection back (same parameters)."""
    crf = CRF(model.label_dictionary, model.tagset_size, init_from_state_dict=True)
    crf.transitions = model.crf.transitions
    model.crf, model.loss_function = crf, ViterbiLoss(model.label_dictionary)
    model.viterbi_decoder = ViterbiDecoder(model.label_dictionary)
    linear = torch.nn.utils.skip_init(torch.nn.Linear, model.embedding2nn.in_features, model.embedding2nn.out_features)
    linear.weight, linear.bias = model.embedding2nn.weight, model.embedding2nn.bias
    model.embedding2nn = linear


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=5000, help="training sentences")
    parser.add_argument("--cell", default="darts_v2")
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument(
        "--match-params",
        action="store_true",
        help="size flair's LSTM so its recurrent layer has the cell layer's parameter count",
    )
    parser.add_argument("--dim", type=int, default=100, help="word vector size")
    parser.add_argument("--charlm", help="FWD.pt:BWD.pt, Flair embeddings stacked on the word vectors")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--eval-batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs (and predictions) per model")
    parser.add_argument(
        "--predict-repeats",
        type=int,
        default=3,
        help="predictions after each timed epoch (a prediction takes a second: one is noisy)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: torch's own choice]")
    parser.add_argument("--device", default=default_device())
    parser.add_argument(
        "--backends",
        default="auto",
        help="comma-separated --backend names our tagger is timed on, one model each (e.g. "
        "cuda-graphs,cuda-loop on a GPU) [default: auto]",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    import flair

    from tagger.cli.runtime import flair_logs_to_stderr

    flair_logs_to_stderr(logging.WARNING)  # stdout holds the JSON line alone
    flair.device = device
    with tempfile.TemporaryDirectory() as tmp:
        data = generate(
            Path(tmp) / "data",
            seed=args.seed,
            train=args.sentences,
            dev=10,
            test=max(args.sentences // 5, 1),
            lm_lines=10,
            raw_paragraphs=1,
        )
        corpus = load_corpus("conll03", data / "conll03")
        vectors = Path(tmp) / "vectors.txt"
        write_vectors(
            vectors, {t for split in (corpus.train, corpus.test) for s in split.tokens for t in s}, args.dim, args.seed
        )
        spec = f"glove:{vectors}" + (f",flair:{args.charlm}" if args.charlm else "")
        embeddings = build_embeddings(spec)
        train = to_sentences(corpus.train, corpus.tag_type)
        test = to_sentences(corpus.test, corpus.tag_type)
    config = TaggerConfig(hidden_size=args.hidden_size)
    cell = load(args.cell)
    lstm_hidden = (
        match_layer(None, args.cell, cell, args.hidden_size, embeddings.embedding_length).hidden_size
        if args.match_params
        else args.hidden_size
    )
    chosen = args.backends.split(",")
    ours = {(args.cell if len(chosen) == 1 else f"{args.cell}_{name}"): name for name in chosen}
    models = {}
    for name, genotype, hidden in (
        *((mine, cell, args.hidden_size) for mine in ours),
        ("flair_lstm", None, lstm_hidden),
        ("flair_stock", None, lstm_hidden),
    ):
        torch.manual_seed(args.seed)
        run = replace(config, hidden_size=hidden, backend=ours.get(name, "auto"), device=str(device))
        model = build_model(run, corpus, embeddings, genotype).to(device)  # on the run's backend (nas.speed.of)
        if name == "flair_stock":
            as_flair_ships(model)
        models[name] = (model, torch.optim.SGD(model.parameters(), lr=SGD_LR))  # as flair's, and train-tagger's default
    epoch_s = {name: [] for name in models}
    predict_s = {name: [] for name in models}
    for name, (model, optimizer) in models.items():  # warm-up: allocator, embedding caches
        train_tagger_epoch(model, train[: 2 * args.batch_size], args.batch_size, optimizer, random.Random(args.seed))
        predict(model, test[: args.eval_batch_size], args.eval_batch_size, name == "flair_stock")
    for rep in range(args.repeats):
        for name, (model, optimizer) in models.items():
            epoch_s[name].append(
                timed(lambda: train_tagger_epoch(model, train, args.batch_size, optimizer, random.Random(rep)), device)
            )
            for _ in range(args.predict_repeats):
                predict_s[name].append(
                    timed(lambda: predict(model, test, args.eval_batch_size, name == "flair_stock"), device)
                )
    record = {
        "bench": "tagger_epoch",
        "device": str(device),
        "cell": args.cell,
        "hidden_size": args.hidden_size,
        "flair_lstm_hidden_size": lstm_hidden,
        "match_params": args.match_params,
        f"{args.cell}_rnn_parameters": rnn_parameters(cell, embeddings.embedding_length, args.hidden_size),
        "flair_lstm_rnn_parameters": rnn_parameters(None, embeddings.embedding_length, lstm_hidden),
        "embeddings": "random word vectors" + (" + Flair char LM pair" if args.charlm else ""),
        "embedding_dim": embeddings.embedding_length,
        "train_sentences": len(train),
        "test_sentences": len(test),
        "train_tokens": sum(len(s) for s in train),
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "predict_repeats": args.predict_repeats,
    }
    for name in models:
        record[f"{name}_epoch_s"] = round(median(epoch_s[name]), 2)
        record[f"{name}_predict_sentences_per_s"] = round(len(test) / median(predict_s[name]), 1)
    record["backends"] = {mine: backends.resolve(name, device) for mine, name in ours.items()}
    for mine in ours:
        tail = "" if len(ours) == 1 else f"_{ours[mine]}"
        record[f"epoch_time_ratio{tail}"] = round(record[f"{mine}_epoch_s"] / record["flair_lstm_epoch_s"], 3)
        record[f"epoch_time_ratio_vs_flair_stock{tail}"] = round(
            record[f"{mine}_epoch_s"] / record["flair_stock_epoch_s"], 3
        )
        for baseline, key in (
            ("flair_lstm", "predict_speed_ratio"),
            ("flair_stock", "predict_speed_ratio_vs_flair_stock"),
        ):
            record[f"{key}{tail}"] = round(
                record[f"{mine}_predict_sentences_per_s"] / record[f"{baseline}_predict_sentences_per_s"], 3
            )
    report(record)


if __name__ == "__main__":
    main()
