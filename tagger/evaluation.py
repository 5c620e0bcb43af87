"""Scoring a tagger on IOB2 spans with seqeval, the CoNLL predictions file, and the per-type table.

Both gold and predicted tags are IOB2 (gold normalised on reading, predictions rebuilt from
flair's predicted spans by `prediction.predict_tags`). The report holds seqeval's strict mode with the scheme passed
explicitly
(it equals flair's span F1) and seqeval's default mode, which matches conlleval. `bin/train-tagger`
writes it at the end of training; `bin/evaluate` reuses it on a saved model, and prints either the
per-type table or conlleval's own report (`conlleval`).
"""

from __future__ import annotations

import os
from collections import Counter

from nas.common.files import atomic_write_text
from nas.common.stats import mean_std

from .prediction import predict_tags
from .tag_schemes import spans


def _plain(report: dict) -> dict:
    return {
        label: {k: (int(v) if k == "support" else float(v)) for k, v in row.items()} for label, row in report.items()
    }


def score(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """seqeval classification reports: `strict` (IOB2 scheme, exact spans) and `lenient` (conlleval)."""
    from seqeval.metrics import classification_report
    from seqeval.scheme import IOB2

    strict = classification_report(gold, pred, mode="strict", scheme=IOB2, output_dict=True, zero_division=0)
    lenient = classification_report(gold, pred, output_dict=True, zero_division=0)
    return {"strict": _plain(strict), "lenient": _plain(lenient), "f1": float(strict["micro avg"]["f1-score"])}


def evaluate(model, sentences: list, gold: list[list[str]], batch_size: int = 64) -> tuple[dict, list[list[str]]]:
    """(seqeval report, predicted IOB2 tags) of a model on sentences with known gold tags."""
    pred = predict_tags(model, sentences, batch_size)
    return score(gold, pred), pred


def evaluate_saved(model, sentences: list, gold: list[list[str]], batch_size: int = 64) -> tuple[dict, list[list[str]]]:
    """`evaluate` as `bin/evaluate` and a run's own test scoring run it on a loaded model: out of the
    garbage collector's way and under `torch.inference_mode`, so the two give the same bytes."""
    import torch

    from nas.common.memory import long_lived_frozen

    with long_lived_frozen(), torch.inference_mode():
        return evaluate(model, sentences, gold, batch_size)


def write_conll(path: str | os.PathLike, tokens: list[list[str]], gold: list[list[str]], pred: list[list[str]]) -> None:
    """`token gold pred` per line, a blank line after each sentence: conlleval's input."""
    lines = []
    for words, g, p in zip(tokens, gold, pred):
        lines += [f"{w} {a} {b}" for w, a, b in zip(words, g, p)]
        lines.append("")
    atomic_write_text(path, "\n".join(lines) + "\n")


def table(report: dict) -> str:
    """Per-type precision/recall/F1 (strict) with support, then the micro average."""
    rows = report["strict"]
    types = sorted(k for k in rows if not k.endswith(" avg"))
    width = max([len("micro avg"), *map(len, types)])
    lines = [f"{'type':<{width}}  precision  recall     f1  support"]
    for name in [*types, "micro avg"]:
        r = rows[name]
        lines.append(
            f"{name:<{width}}  {100 * r['precision']:9.2f}  {100 * r['recall']:6.2f}  "
            f"{100 * r['f1-score']:5.2f}  {r['support']:7d}"
        )
    return "\n".join(lines)


def conlleval(gold: list[list[str]], pred: list[list[str]]) -> str:
    """conlleval.pl's report, figure for figure, for IOB2 gold and predicted tags of the same tokens.

    On IOB2 tags conlleval's chunks are exactly the spans `tag_schemes.spans` reads, and a chunk is
    correct when gold and prediction have the same start, end and type. Its counts: tokens; gold
    phrases; found (predicted) phrases; correct phrases; accuracy over tokens whose whole tag
    matches. Per type it prints, after precision, recall and FB1, the number of phrases *found*
    (not the gold support seqeval reports). Types are sorted by name; percentages are 0 where a
    denominator is 0, as in the perl script.
    """
    tokens = sum(map(len, gold))
    right_tags = sum(g == p for gs, ps in zip(gold, pred) for g, p in zip(gs, ps))
    truth, found, correct = Counter(), Counter(), Counter()
    for gs, ps in zip(gold, pred):
        gold_spans, pred_spans = set(spans(gs)), set(spans(ps))
        truth.update(kind for _, _, kind in gold_spans)
        found.update(kind for _, _, kind in pred_spans)
        correct.update(kind for _, _, kind in gold_spans & pred_spans)

    def figures(c: int, f: int, t: int) -> str:
        precision = 100 * c / f if f else 0.0
        recall = 100 * c / t if t else 0.0
        fb1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return f"precision: {precision:6.2f}%; recall: {recall:6.2f}%; FB1: {fb1:6.2f}"

    total = sum(truth.values()), sum(found.values()), sum(correct.values())
    lines = [f"processed {tokens} tokens with {total[0]} phrases; found: {total[1]} phrases; correct: {total[2]}."]
    if tokens:
        lines.append(f"accuracy: {100 * right_tags / tokens:6.2f}%; {figures(total[2], total[1], total[0])}")
    for kind in sorted(truth | found):
        lines.append(f"{kind:>17}: {figures(correct[kind], found[kind], truth[kind])}  {found[kind]}")
    return "\n".join(lines)


def summarise(reports: list[dict]) -> dict:
    """Mean and sample standard deviation (0 for one run) of strict F1, overall and per type, over runs."""
    types = sorted({k for r in reports for k in r["strict"] if not k.endswith(" avg")})
    return {
        "f1": mean_std([r["f1"] for r in reports]),
        "per_type_f1": {t: mean_std([r["strict"].get(t, {}).get("f1-score", 0.0) for r in reports]) for t in types},
    }


def summary_table(summary: dict) -> str:
    types = list(summary["per_type_f1"])
    width = max([len("micro avg"), *map(len, types)])
    lines = [f"{'type':<{width}}  f1 mean ± std (strict, {len(summary['f1']['runs'])} runs)"]
    for name, s in [*summary["per_type_f1"].items(), ("micro avg", summary["f1"])]:
        lines.append(f"{name:<{width}}  {100 * s['mean']:.2f} ± {100 * s['std']:.2f}")
    return "\n".join(lines)
