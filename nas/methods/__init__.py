"""The search methods by name: a registry the commands read before any work starts (it imports no torch).

A method is a class in a module of this package (`base.SearchMethod` says what it implements).
Its entry here says where the class comes from (a function that imports it, called only when a
search starts) and what `bin/search-lm` must know while it parses flags: the method's part of the
`--method` help, its own settings (a dataclass in `settings`, light, since the flags are made from
it before torch loads; the older methods' settings are still `SearchConfig` fields, listed in
`options`), the flags it cannot take, and the setting that counts its epochs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable

from nas.common.errors import InputError
from nas.common.flags import flag_name
from .settings import BetaDartsSettings, DartsMinusSettings, DrnasSettings, GdasSettings, MethodSettings, SdartsSettings


@dataclass(frozen=True)
class Entry:
    load: Callable[[], type]  # imports and returns the method's class
    summary: str  # its part of the --method help
    options: tuple[str, ...] = ()  # SearchConfig fields only this method reads
    refuses: dict[str, str] = field(default_factory=dict)  # SearchConfig field → why this method cannot take it
    epochs: str = "epochs"  # the SearchConfig field that counts its epochs
    unit: str = "epoch"  # what one of those epochs is called in the progress lines
    settings: type[MethodSettings] = MethodSettings  # its own settings: its flags, config.json's method_settings


def _darts() -> type:
    from .darts import Darts

    return Darts


def _idarts() -> type:
    from .idarts import IDarts

    return IDarts


def _ess() -> type:
    from .ess import Ess

    return Ess


def _random_search() -> type:
    from .random_search import RandomSearch

    return RandomSearch


def _enas() -> type:
    from .enas import Enas

    return Enas


def _beta_darts() -> type:
    from .beta_darts import BetaDarts

    return BetaDarts


def _darts_minus() -> type:
    from .darts_minus import DartsMinus

    return DartsMinus


def _sdarts_rs() -> type:
    from .sdarts import SdartsRS

    return SdartsRS


def _gdas() -> type:
    from .gdas import Gdas

    return Gdas


def _drnas() -> type:
    from .drnas import Drnas

    return Drnas


NO_ALPHA_STEP = "this method has no α step to take in first or second order (it draws its architectures)"
NO_ALPHA = "this method has no α, so no Hessian to stop on (the convergence rule follows its best candidate)"

METHODS: dict[str, Entry] = {
    "darts": Entry(_darts, "softmax per edge"),
    "idarts": Entry(_idarts, "one softmax over all edges into a node", options=("top_n",)),
    "ess": Entry(
        _ess,
        "joint intra- and inter-cell search in rounds (ESS)",
        options=(
            "search_space",
            "cell",
            "rounds",
            "intra_steps",
            "inter_steps",
            "arch_lr_intra",
            "arch_lr_inter",
            "history",
            "inter_nodes",
            "gate_squash",
            "gate_size_match",
        ),
        refuses={
            "max_batches_per_epoch": "with --method ess a round is --intra-steps + --inter-steps batches",
            "epochs": "--method ess counts --rounds instead",
        },
        epochs="rounds",
        unit="round",
    ),
    "random": Entry(
        _random_search,
        "random search with weight sharing: one uniformly drawn cell per batch, then the best of "
        "--candidates draws on validation (Li & Talwalkar 2019)",
        options=("candidates", "track_candidates"),
        refuses={"order": NO_ALPHA_STEP, "early_stop": NO_ALPHA},
    ),
    "enas": Entry(
        _enas,
        "an LSTM controller samples the cell for each batch and learns by REINFORCE after each epoch; "
        "the best of --candidates samples on a validation batch is kept (ENAS, Pham et al. 2018)",
        options=("candidates", "controller_steps", "controller_lr", "entropy_weight", "baseline_decay"),
        refuses={"order": NO_ALPHA_STEP, "early_stop": NO_ALPHA},
    ),
    "beta-darts": Entry(
        _beta_darts, "DARTS with the Beta-Decay regulariser on α (β-DARTS, Ye et al. 2022)", settings=BetaDartsSettings
    ),
    "darts-minus": Entry(
        _darts_minus,
        "DARTS with an auxiliary skip on every edge whose weight decays to 0 (DARTS-, Chu et al. 2021)",
        settings=DartsMinusSettings,
    ),
    "sdarts-rs": Entry(
        _sdarts_rs,
        "DARTS whose weight step sees randomly perturbed mixing weights (SDARTS-RS, Chen & Hsieh 2020)",
        settings=SdartsSettings,
    ),
    "gdas": Entry(
        _gdas,
        "one op per edge sampled by a hard Gumbel-softmax, τ annealed (GDAS, Dong & Yang 2019)",
        settings=GdasSettings,
    ),
    "drnas": Entry(
        _drnas,
        "mixing weights drawn from a Dirichlet whose concentration α learns (DrNAS, Chen et al. 2021)",
        settings=DrnasSettings,
    ),
}


def entry(name: str) -> Entry:
    """The entry of method `name`; an unknown name (from a stored config.json) is an InputError."""
    if name not in METHODS:
        raise InputError(f"--method: unknown method {name!r} (one of {', '.join(METHODS)})")
    return METHODS[name]


def method_class(name: str) -> type:
    """The class of method `name` (a `nas.methods.base.SearchMethod`), imported now."""
    return entry(name).load()


def total_epochs(config: Any) -> int:
    """Epochs of the search loop, counted by the method's own setting (ESS: rounds)."""
    return getattr(config, entry(config.method).epochs)


def own_settings(e: Entry) -> tuple[str, ...]:
    """The settings only the method of entry `e` reads: its `SearchConfig` fields and its settings' fields."""
    return e.options + tuple(f.name for f in fields(e.settings))


def method_setting_names() -> tuple[str, ...]:
    """Every registered method's own settings (`settings` fields), each once: the flags made from them."""
    return tuple(dict.fromkeys(f.name for e in METHODS.values() for f in fields(e.settings)))


def method_settings(config: Any, where: Callable[[str], str] = flag_name) -> MethodSettings:
    """The settings of `config.method`, from `config.method_settings` (none stored, as in a run from
    before they were: the defaults), checked (a problem names `where(name)`)."""
    return entry(config.method).settings.of(config.method_settings, where)


def check_method_flags(method: str, given: dict[str, Any]) -> None:
    """Flags given (not None) that do not fit `method`: another method's settings, or ones it counts otherwise."""
    own = own_settings(entry(method))
    for name in (n for e in METHODS.values() for n in own_settings(e)):
        if name not in own and given.get(name) is not None:
            owners = " or ".join(m for m, e in METHODS.items() if name in own_settings(e))
            raise InputError(f"{flag_name(name)}: only with --method {owners}")
    for name, why in METHODS[method].refuses.items():
        if given.get(name) is not None:
            raise InputError(f"{flag_name(name)}: {why}")
