"""The search methods by name: a registry the commands read before any work starts (it imports no torch).

A method is a class in a module of this package (`base.SearchMethod` says what it implements).
Its entry here says where the class comes from (a function that imports it, called only when a
search starts) and what `bin/search-lm` must know while it parses flags: the method's part of the
`--method` help, its own settings (a dataclass in `settings`, light, since the flags are made from
it before torch loads), the flags it cannot take, and the setting that counts its epochs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any, Callable

from nas.common.errors import InputError
from nas.common.flags import flag_name
from .settings import (
    BetaDartsSettings,
    DartsMinusSettings,
    DrnasSettings,
    EnasSettings,
    EssSettings,
    GdasSettings,
    MethodSettings,
    RandomSearchSettings,
    SdartsSettings,
    SearchSettings,
)


@dataclass(frozen=True)
class Entry:
    load: Callable[[], type]  # imports and returns the method's class
    summary: str  # its part of the --method help
    options: tuple[str, ...] = ()  # config fields only this method reads besides its settings (I-DARTS: top_n)
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
NO_ALPHA = (
    "this method has no α, so no Hessian to stop on (the convergence rule, which follows its best candidate, is "
    "reported at the end; --early-stop converged is for the methods with α)"
)

METHODS: dict[str, Entry] = {
    "darts": Entry(_darts, "softmax per edge"),
    "idarts": Entry(_idarts, "one softmax over all edges into a node", options=("top_n",)),
    "ess": Entry(
        _ess,
        "joint intra- and inter-cell search in rounds (ESS)",
        settings=EssSettings,
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
        settings=RandomSearchSettings,
        refuses={"order": NO_ALPHA_STEP, "early_stop": NO_ALPHA},
    ),
    "enas": Entry(
        _enas,
        "an LSTM controller samples the cell for each batch and learns by REINFORCE after each epoch; "
        "the best of --candidates samples on a validation batch is kept (ENAS, Pham et al. 2018)",
        settings=EnasSettings,
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
    """The settings only the method of entry `e` reads: its config fields and its settings' fields."""
    return e.options + tuple(f.name for f in fields(e.settings))


def method_setting_names() -> tuple[str, ...]:
    """Every registered method's settings kept under `method_settings`, each once: the flags made from them."""
    return tuple(dict.fromkeys(f.name for e in METHODS.values() if not e.settings.flat for f in fields(e.settings)))


def flat_setting_names() -> tuple[str, ...]:
    """Every registered method's settings kept as config fields (`MethodSettings.flat`, and an entry's `options`),
    each once: the flags bin/search-lm writes out for them."""
    return tuple(
        dict.fromkeys(n for e in METHODS.values() for n in own_settings(e) if n in e.options or e.settings.flat)
    )


def flat_fields(name: str, leave_out: tuple[str, ...] = ()) -> type:
    """A plain dataclass with a field for each flat setting of the registered methods (but `leave_out`), with
    its default: what a search's config inherits, so that the settings' one home is their method's dataclass."""
    made: dict[str, tuple] = {}
    for e in METHODS.values():
        if e.settings.flat:
            for f in fields(e.settings):
                if f.name not in leave_out:
                    made.setdefault(f.name, (f.name, f.type, field(default=f.default)))
    return make_dataclass(name, list(made.values()))


def flat_ranges() -> dict[str, Any]:
    """The allowed ranges of the flat settings' numbers, for the configs' checks and bin/search-lm's flag types."""
    return {n: r for e in METHODS.values() if e.settings.flat for n, r in e.settings.ranges().items()}


def method_settings(config: Any, where: Callable[[str], str] = flag_name) -> MethodSettings:
    """The settings of `config.method` as the method reads them (`MethodSettings.read`), checked (a problem
    names `where(name)`)."""
    return entry(config.method).settings.read(config, where)


def search_settings(config: Any, **given: Any) -> SearchSettings:
    """What the method of a search's `config` reads: the fields of `SearchSettings` the config has (`given`
    in place of them, and for those it lacks), its own settings among them."""
    values = {f.name: getattr(config, f.name) for f in fields(SearchSettings) if hasattr(config, f.name)}
    return SearchSettings(**{**values, "method_settings": method_settings(config), **given})


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
