"""Training and validation curves of any run directory, read from the files its command writes.

    search    bin/search-lm      log.jsonl, a line per epoch (per round for ESS): train_ppl, valid_ppl
    train-lm  bin/train-lm       log.jsonl, a line per epoch: train_ppl, valid_ppl
    tagger    bin/train-tagger   loss.tsv, flair's table of an epoch per row: TRAIN_LOSS, DEV_LOSS,
                                 DEV_F1 (flair's micro F1 on dev), LEARNING_RATE; with --runs N
                                 every seed's run in seed-S/

The kind is told by config.json (a search has a `method`, a tagger `embeddings`). A last line
without its newline, torn by a kill or still being written, is left out. Only files are read here
(and the method registry, for what a search counts its epochs in), so no torch, flair or tagger is
imported. `write_tensorboard` writes the same curves as
TensorBoard events when the `tensorboard` package is installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from nas.common.errors import InputError
from nas.common.files import utf8_lines
from nas.common.runs import RunDir
from nas.methods import METHODS

PERPLEXITY = {"train_ppl": "train (dropout on)", "valid_ppl": "valid"}  # log.jsonl key → split
# loss.tsv column → (metric, split); flair writes DEV_* only when there is a dev set it scores
FLAIR_COLUMNS = {
    "TRAIN_LOSS": ("loss", "train"),
    "DEV_LOSS": ("loss", "dev"),
    "DEV_F1": ("F1 (flair's micro average)", "dev"),
    "LEARNING_RATE": ("learning rate", "train"),
}


@dataclass
class Series:
    """One curve: `metric` on `split` at each x (an epoch); `run` names the seed of a run of several
    seeds ("" otherwise)."""

    metric: str
    split: str
    x: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    run: str = ""

    @property
    def name(self) -> str:
        return f"{self.run}: {self.split}" if self.run else self.split


@dataclass
class Curves:
    kind: str
    path: Path
    series: list[Series]
    x_label: str = "epoch"

    def metrics(self) -> list[str]:
        return list(dict.fromkeys(s.metric for s in self.series))


def run_kind(config: dict, run_dir: str | Path) -> str:
    """search, train-lm or tagger, from the run directory's config.json (`config`)."""
    if "method" in config:
        return "search"
    if "embeddings" in config:
        return "tagger"
    if "cell" in config:
        return "train-lm"
    raise InputError(
        f"{run_dir}: not a run of bin/search-lm, bin/train-lm or bin/train-tagger (its config.json "
        "has neither `method`, `embeddings` nor `cell`)"
    )


def read_curves(run_dir: str | Path) -> Curves:
    """Every curve of a run directory; InputError when it has not finished an epoch yet."""
    path = Path(run_dir)
    config = RunDir(path).config()
    kind = run_kind(config, path)
    x_label = METHODS[config["method"]].unit if config.get("method") in METHODS else "epoch"
    if kind == "tagger":
        seeds = sorted((p for p in path.glob("seed-*") if (p / "loss.tsv").is_file()), key=_seed_number)
        series = (
            [s for seed in seeds for s in _flair_table(seed / "loss.tsv", seed.name)]
            if seeds
            else _flair_table(path / "loss.tsv", "")
        )
        where = "loss.tsv"
    else:
        series = _perplexities(RunDir(path).read_log())
        where = "log.jsonl"
    if not any(s.x for s in series):
        raise InputError(f"{path}: a {kind} run with no finished {x_label} yet (nothing in {where})")
    return Curves(kind, path, [s for s in series if s.x], x_label)


def _seed_number(path: Path) -> int:
    match = re.fullmatch(r"seed-(\d+)", path.name)
    return int(match.group(1)) if match else -1


def _perplexities(log: list[dict]) -> list[Series]:
    series = {key: Series("perplexity", split) for key, split in PERPLEXITY.items()}
    for record in log:
        for key, curve in series.items():
            if record.get(key) is not None and "epoch" in record:
                curve.x.append(record["epoch"])
                curve.values.append(record[key])
    return list(series.values())


def _flair_table(path: Path, run: str) -> list[Series]:
    """The curves in flair's loss.tsv (tab-separated, a header row, then a row per epoch)."""
    if not path.is_file():
        return []
    rows = utf8_lines(path, complete=True)
    header = next(rows, (1, ""))[1].split("\t")
    if header == [""]:  # not written yet
        return []
    if "EPOCH" not in header:
        raise InputError(f"{path}: line 1: not flair's loss table (no EPOCH column)")
    columns = {name: k for k, name in enumerate(header) if name in FLAIR_COLUMNS}
    series = {name: Series(*FLAIR_COLUMNS[name], run=run) for name in FLAIR_COLUMNS if name in columns}
    for number, line in rows:
        fields = line.split("\t")
        try:
            epoch = int(fields[header.index("EPOCH")])
            values = {name: float(fields[k]) for name, k in columns.items()}
        except (ValueError, IndexError):
            raise InputError(
                f"{path}: line {number}: expected {len(header)} tab-separated fields with numbers "
                f"under {', '.join(['EPOCH', *columns])}"
            ) from None
        for name, value in values.items():
            series[name].x.append(epoch)
            series[name].values.append(value)
    return list(series.values())


def write_tensorboard(curves: Curves, log_dir: str | Path) -> Path:
    """The curves as TensorBoard scalars (tag METRIC/SPLIT, step = epoch), a seed's in its own
    subdirectory; earlier event files there are replaced, so a rerun does not draw every curve twice.
    Needs the `tensorboard` package, which this toolkit does not install."""
    try:
        import tensorboard  # noqa: F401 - torch's SummaryWriter needs it
    except ImportError:
        raise InputError("--tensorboard needs the tensorboard package: pip install tensorboard") from None
    from torch.utils.tensorboard import SummaryWriter

    root = Path(log_dir)
    for run in dict.fromkeys(s.run for s in curves.series):
        where = root / run if run else root
        for old in where.glob("events.out.tfevents.*"):
            old.unlink()
        writer = SummaryWriter(str(where))
        for s in (s for s in curves.series if s.run == run):
            for epoch, value in zip(s.x, s.values):
                writer.add_scalar(f"{s.metric}/{s.split}", value, epoch)
        writer.close()
    return root
