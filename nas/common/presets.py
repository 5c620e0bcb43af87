"""The papers' settings by name: `--preset NAME` on bin/search-lm, bin/train-lm and bin/train-tagger.

Plain data (no torch, no click). Each preset belongs to one command and sets that command's flags
(keys: the command's option names as Python names); a flag given on the command line still wins
(`nas.common.flag_defaults`), and the run's config.json records the resolved values. Where a paper is
silent the preset leaves the flag alone, so the command's own default applies; the `source` line
says where each value comes from (the papers are listed in docs/papers.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import InputError


@dataclass(frozen=True)
class Preset:
    command: str  # the bin/ command it belongs to
    source: str  # where the values come from
    values: dict[str, Any] = field(default_factory=dict)
    data: str | None = None  # search-lm: the corpus directory it searches on, as a placeholder (PTB_DIR)


# DARTS's PTB search (Liu et al. 2019), the base that I-DARTS, ESS and NASABN say they copy.
_DARTS_SEARCH = {
    "emsize": 300,
    "nhid": 300,
    "batch_size": 256,
    "bptt": 35,
    "lr": 20.0,
    "wdecay": 5e-7,
    "clip": 0.25,
    "dropout": 0.75,
    "dropouth": 0.25,
    "dropoutx": 0.75,
    "dropouti": 0.2,
    "dropoute": 0.0,
    "tar": 1e-3,
    "arch_lr": 3e-3,
    "arch_wdecay": 1e-3,
    "nodes": 8,
}
# DARTS's PTB retraining (Liu et al. 2019, the DARTS code's rnn/train.py); the cell runs at nhid = emsize.
_DARTS_RETRAIN = {
    "emsize": 850,
    "batch_size": 64,
    "eval_batch_size": 10,
    "test_batch_size": 1,
    "bptt": 35,
    "lr": 20.0,
    "wdecay": 8e-7,
    "clip": 0.25,
    "dropout": 0.75,
    "dropouth": 0.25,
    "dropoutx": 0.75,
    "dropouti": 0.2,
    "dropoute": 0.1,
    "ar": 0.0,
    "tar": 1e-3,
    "nonmono": 5,
    "epochs": 8000,
}
# The tagger of I-DARTS (Jiang et al. 2019) and ESS (Li et al. 2020), both after Akbik et al. (2019).
_FLAIR_NER = {
    "hidden_size": 512,
    "batch_size": 24,
    "lr": 0.1,
    "clip": 5.0,
    "anneal_factor": 0.25,
    "patience": 2,
    "max_epochs": 150,
    "runs": 5,
    "locked_dropout": 0.5,
    "word_dropout": 0.05,
    "reproject": True,
}

PRESETS: dict[str, Preset] = {
    "darts-ptb": Preset(
        "search-lm",
        "Liu et al. 2019 (DARTS PTB search: 50 epochs, batch 256, SGD lr 20, Adam 3e-3 on α); second order, "
        "the search that gave DARTS_V2 (55.7 test ppl)",
        {"method": "darts", "order": "2", "epochs": 50, **_DARTS_SEARCH},
        data="PTB_DIR",
    ),
    "idarts-ptb": Preset(
        "search-lm",
        "Jiang et al. 2019 §3.1 (I-DARTS: 40 epochs, batch 256, SGD lr 20 wd 5e-7, Adam 3e-3 wd 1e-3, "
        "emsize = hidden = 300, 8 nodes; the rest copied from DARTS); the order is not stated",
        {"method": "idarts", "epochs": 40, "top_n": 1, **_DARTS_SEARCH},
        data="PTB_DIR",
    ),
    "ess-ptb": Preset(
        "search-lm",
        "Li et al. 2020 §5.1 (ESS PTB: 8 intra nodes, 3 history vectors and 3 inter nodes, "
        "batch 256, hidden 300, arch lr 3e-3 intra / 1e-3 inter, 50 rounds, bptt 35; the rest DARTS's)",
        {
            "method": "ess",
            "search_space": "joint",
            "rounds": 50,
            "history": 3,
            "inter_nodes": 3,
            "arch_lr_intra": 3e-3,
            "arch_lr_inter": 1e-3,
            **_DARTS_SEARCH,
        },
        data="PTB_DIR",
    ),
    "ess-wt103": Preset(
        "search-lm",
        "Li et al. 2020 §5.1 (ESS WikiText-103: 12 intra nodes, 5 inter nodes, batch 128, "
        "hidden 300, arch lr 1e-3 intra / 1e-4 inter, bptt 70); 5 history vectors, as on PTB the inter nodes "
        "number the history vectors",
        {
            "method": "ess",
            "search_space": "joint",
            "rounds": 50,
            **_DARTS_SEARCH,
            "nodes": 12,
            "inter_nodes": 5,
            "history": 5,
            "batch_size": 128,
            "bptt": 70,
            "arch_lr_intra": 1e-3,
            "arch_lr_inter": 1e-4,
        },
        data="WT103_DIR",
    ),
    "nasabn-ptb": Preset(
        "search-lm",
        "Jing et al. 2020 §IV.B (NASABN: the DARTS PTB settings, 50 epochs, batch 256, bptt 35, clip 0.25; "
        "6 intermediate nodes, the first fixed, so 5 searched; attention searched among dot and multi-head)",
        {"method": "darts", "epochs": 50, **_DARTS_SEARCH, "nodes": 5, "attention": "search"},
        data="PTB_DIR",
    ),
    "darts-retrain-ptb": Preset(
        "train-lm",
        "Liu et al. 2019 (DARTS PTB retraining: 850 hidden, batch 64, SGD lr 20 then ASGD, wd 8e-7, clip "
        "0.25, dropouts 0.75/0.25/0.75/0.2/0.1, TAR 1e-3; 8000 epochs, DARTS's train.py limit)",
        dict(_DARTS_RETRAIN),
    ),
    "darts-retrain-wt2": Preset(
        "train-lm",
        "Liu et al. 2019 (WikiText-2: as on PTB with 700 hidden, hidden dropout 0.15, weight decay 5e-7)",
        {**_DARTS_RETRAIN, "emsize": 700, "dropouth": 0.15, "wdecay": 5e-7},
    ),
    "flair-ner": Preset(
        "train-tagger",
        "Jiang et al. 2019 §3.2 (hidden 512, SGD lr 0.1, clip 5.0, lr × 0.25 after 2 epochs "
        "without improvement, variational dropout on the RNN input and output, F1 over 5 runs), Li et al. 2020 §5.1 "
        "(Akbik et al. 2019's setup with batch 24 and hidden 512; I-DARTS states no batch size, flair's default is "
        "32), 150 epochs (this toolkit's default); the embeddings (GloVe 100d + pooled Flair) are yours to give",
        dict(_FLAIR_NER),
    ),
    "flair-ner-train-dev": Preset(
        "train-tagger",
        "flair-ner, trained on train + dev, the final model tested",
        {**_FLAIR_NER, "train_with_dev": True},
    ),
}


def preset_values(name: str, command: str) -> dict[str, Any]:
    """The flag values of preset `name` for bin/`command`; an InputError if it is another command's or unknown."""
    preset = PRESETS.get(name)
    own = ", ".join(n for n, p in PRESETS.items() if p.command == command)
    if preset is None:
        raise InputError(f"--preset {name}: no such preset (bin/{command} has: {own})")
    if preset.command != command:
        raise InputError(
            f"--preset {name}: a preset of bin/{preset.command}, not of bin/{command} (bin/{command} has: {own})"
        )
    return dict(preset.values)


def presets_help(command: str) -> str:
    """The --preset help: the command's presets by name."""
    return (
        "The papers' settings (flags given still win): "
        + ", ".join(n for n, p in PRESETS.items() if p.command == command)
        + "; sources in common/presets.py."
    )


def cell_recipe(stem: str) -> str | None:
    """The bin/search-lm command that makes cell file STEM.json, when a search preset is named like it
    (ess_wt103.json: `bin/search-lm --preset ess-wt103 ...`)."""
    preset = PRESETS.get(stem.replace("_", "-"))
    if preset is None or preset.command != "search-lm":
        return None
    return f"bin/search-lm --preset {stem.replace('_', '-')} --data {preset.data} --out {stem}.json"
