"""The search methods by name: a registry the commands read before any work starts (it imports no torch).

A method is a class in a module of this package (`base.SearchMethod` says what it implements).
Its entry here names that class, imported only when a search starts, and says what
`bin/search-lm` must know while it parses flags: the method's part of the `--method` help, the
settings only it reads, the flags it cannot take, and the setting that counts its epochs.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Entry:
    implementation: str  # "module:Class"
    summary: str  # its part of the --method help
    options: tuple[str, ...] = ()  # SearchConfig fields only this method reads
    refuses: dict[str, str] = field(default_factory=dict)  # SearchConfig field → why this method cannot take it
    epochs: str = "epochs"  # the SearchConfig field that counts its epochs
    unit: str = "epoch"  # what one of those epochs is called in the progress lines


NO_ALPHA_STEP = "this method has no α step to take in first or second order (it draws its architectures)"

METHODS: dict[str, Entry] = {
    "darts": Entry("nas.methods.darts:Darts", "softmax per edge"),
    "idarts": Entry("nas.methods.idarts:IDarts", "one softmax over all edges into a node"),
    "ess": Entry("nas.methods.ess:Ess", "joint intra- and inter-cell search in rounds (ESS)",
                 options=("search_space", "cell", "rounds", "intra_steps", "inter_steps", "arch_lr_intra",
                          "arch_lr_inter", "history", "inter_nodes", "gate_squash", "gate_size_match"),
                 refuses={"max_batches_per_epoch": "with --method ess a round is --intra-steps + --inter-steps batches",
                          "epochs": "--method ess counts --rounds instead"},
                 epochs="rounds", unit="round"),
    "random": Entry("nas.methods.random_search:RandomSearch",
                    "random search with weight sharing: one uniformly drawn cell per batch, then the best of "
                    "--candidates draws on validation (Li & Talwalkar 2019)",
                    options=("candidates",), refuses={"order": NO_ALPHA_STEP}),
    "enas": Entry("nas.methods.enas:Enas",
                  "an LSTM controller samples the cell for each batch and learns by REINFORCE after each epoch; "
                  "the best of --candidates samples on a validation batch is kept (ENAS, Pham et al. 2018)",
                  options=("candidates", "controller_steps", "controller_lr", "entropy_weight", "baseline_decay"),
                  refuses={"order": NO_ALPHA_STEP}),
}


def method_class(name: str) -> type:
    """The class of method `name` (a `nas.methods.base.SearchMethod`), imported now."""
    module, cls = METHODS[name].implementation.split(":")
    return getattr(importlib.import_module(module), cls)
