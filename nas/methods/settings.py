"""The search methods' own settings: a frozen dataclass per method whose fields are its settings.

They live here, not in the methods' modules, because the commands make their flags from them
before torch loads (the methods' modules import torch). Each field is declared with `setting`:
its default (from the method's paper), its allowed range, its help line. A method receives its
own as `SearchSettings.method_settings` (`nas.methods.search_settings` reads them from a search's
config), never the config itself.

Two kinds, by where a search's config.json keeps them:
- most methods' (β-DARTS, DARTS−, SDARTS-RS, GDAS, DrNAS): under `method_settings`, one flag per
  field made for every registered method (`nas.cli.method_flags`), `of` reads them back, checked;
- ESS's, random search's and ENAS's (`flat = True`), which are older than `method_settings`: as
  top-level fields of the configs, which take them from here (`nas.methods.flat_fields`), so
  config.json keeps the layout earlier runs resume from; their flags are written out in
  `bin/search-lm` (and copied by `bin/search-tagger`), their ranges checked with the config's.
Light on purpose (no torch, no click).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, ClassVar, TypeVar

from nas.common.errors import InputError
from nas.common.ranges import AT_LEAST_1, MANY, NODES, NON_NEGATIVE, POSITIVE, Range, check_ranges
from nas.common.flags import flag_name

S = TypeVar("S", bound="MethodSettings")

SEARCH_SPACES = ("intra", "inter", "joint")
GATE_SQUASHES = ("sigmoid", "2sigmoid", "none")  # the keys of nas.cells.gates.SQUASHES
GATE_SIZE_MATCHES = ("project", "pad")  # nas.cells.gates.SIZE_MATCHES


def setting(default: Any, allowed: Range | None, help: str = "") -> Any:
    """A field of a method's settings: its default, the range its flag and config.json must keep to (None: not a
    number), its help line (a flat setting's is its flag's, in bin/search-lm)."""
    return field(default=default, metadata={"range": allowed, "help": help})


@dataclass(frozen=True)
class MethodSettings:
    """The settings only one method reads (none here: DARTS and I-DARTS); a method's subclass declares its
    own with `setting`."""

    flat: ClassVar[bool] = False  # True: top-level fields of the configs, not `method_settings` (see above)

    @classmethod
    def ranges(cls) -> dict[str, Range]:
        return {f.name: f.metadata["range"] for f in fields(cls) if f.metadata["range"] is not None}

    @classmethod
    def of(cls: type[S], values: dict[str, Any], where: Callable[[str], str] = flag_name) -> S:
        """The settings `values` gives (the rest at their defaults), each a number in its range; a name
        that is not one of them, or a value that is not such a number, is an InputError naming `where(name)`."""
        known = {f.name for f in fields(cls)}
        for name, value in values.items():
            if name not in known:
                raise InputError(f"{where(name)}: not a setting of this method")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"{where(name)}: must be a number, got {value!r}")
        settings = cls(**values)
        check_ranges(settings, cls.ranges(), where)
        return settings

    @classmethod
    def read(cls: type[S], config: Any, where: Callable[[str], str] = flag_name) -> S:
        """The settings a search's `config` gives the method: its fields (flat; one the config leaves out is at
        its default, and the config's own check covers their ranges), else its `method_settings` (none stored,
        as in a run from before they were: the defaults), checked, a problem naming `where(name)`."""
        if cls.flat:
            return cls(**{f.name: getattr(config, f.name) for f in fields(cls) if hasattr(config, f.name)})
        return cls.of(config.method_settings, where)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SearchSettings:
    """What a search method reads of a search's settings, whichever task it searches on: the search layer's
    sizes, the α step's settings, the epochs its schedule spans, and `method_settings`, the method's own.
    The LM search takes them from its `nas.runs.config.SearchConfig`, the tagging search from its own config
    (`nas.methods.search_settings`)."""

    method: str
    seed: int
    epochs: int
    method_settings: MethodSettings
    # the search layer
    emsize: int
    nhid: int
    nodes: int
    top_n: int
    dropoutx: float
    dropouth: float
    attention_heads: int
    # the α step, and the weight step's decay and clipping the second order unrolls
    arch_lr: float
    arch_wdecay: float
    order: int
    wdecay: float
    clip: float
    eval_batches: int | None
    eval_batch_size: int  # the validation's batch size (GDAS's batch statistics need 2)


@dataclass(frozen=True)
class EssSettings(MethodSettings):
    """ESS (`nas.methods.ess`, Li et al. 2020): the search space, the rounds' two phases, the gates' shape."""

    flat: ClassVar[bool] = True
    search_space: str = setting("joint", None)  # one of SEARCH_SPACES
    cell: dict | None = setting(None, None)  # the fixed intra cell (genotype dict) of an inter-only search
    rounds: int = setting(50, AT_LEAST_1)  # the LM search's epochs (the tagging search counts them as --epochs)
    intra_steps: int | None = setting(None, AT_LEAST_1)  # None: half an epoch, so a round is about one pass
    inter_steps: int | None = setting(None, AT_LEAST_1)
    arch_lr_intra: float = setting(3e-3, POSITIVE)
    arch_lr_inter: float = setting(1e-3, POSITIVE)
    history: int = setting(3, NODES)
    inter_nodes: int = setting(3, NODES)
    gate_squash: str = setting("sigmoid", None)  # one of GATE_SQUASHES
    gate_size_match: str = setting("project", None)  # one of GATE_SIZE_MATCHES


@dataclass(frozen=True)
class RandomSearchSettings(MethodSettings):
    """Random search with weight sharing (`nas.methods.random_search`, Li & Talwalkar 2019)."""

    flat: ClassVar[bool] = True
    candidates: int = setting(100, MANY)  # architectures scored at the end, the best kept
    track_candidates: int = setting(10, MANY)  # fixed draws scored at each epoch end (the convergence rule's)


@dataclass(frozen=True)
class EnasSettings(MethodSettings):
    """ENAS (`nas.methods.enas`, Pham et al. 2018): the candidates and the controller's training."""

    flat: ClassVar[bool] = True
    candidates: int = setting(100, MANY)  # architectures scored at the end, the best kept
    controller_steps: int = setting(2000, AT_LEAST_1)  # REINFORCE updates after each epoch (paper §2.2)
    controller_lr: float = setting(3.5e-4, POSITIVE)  # Adam's learning rate (paper §3.1)
    entropy_weight: float = setting(1e-4, NON_NEGATIVE)  # weight of the sample entropy in the reward (paper §3.1)
    baseline_decay: float = setting(0.99, Range(0, 1, high_open=True))  # the reward's moving average (ENAS code)


@dataclass(frozen=True)
class BetaDartsSettings(MethodSettings):
    """β-DARTS (`nas.methods.beta_darts`): the weight of its regulariser, moving linearly over the epochs."""

    beta_lambda_start: float = setting(
        0.0, NON_NEGATIVE, "beta-darts: weight λ of the Beta-Decay regulariser in the first epoch"
    )
    beta_lambda_end: float = setting(50.0, NON_NEGATIVE, "beta-darts: λ in the last epoch (linear in between)")


@dataclass(frozen=True)
class DartsMinusSettings(MethodSettings):
    """DARTS− (`nas.methods.darts_minus`): the auxiliary skip's first weight (the paper's 1)."""

    aux_skip_start: float = setting(
        1.0,
        NON_NEGATIVE,
        "darts-minus: weight β of the auxiliary skip (identity) on every "
        "edge in the first epoch; it decays linearly to 0 in the last",
    )


@dataclass(frozen=True)
class SdartsSettings(MethodSettings):
    """SDARTS-RS (`nas.methods.sdarts`): the noise's half-width, moving linearly over the epochs (the authors' code)."""

    epsilon_start: float = setting(
        0.03,
        Range(0, 1),
        "sdarts-rs: ε, the half-width of the uniform noise added to each "
        "edge's softmax weights for the weight step, in the first epoch",
    )
    epsilon_end: float = setting(0.3, Range(0, 1), "sdarts-rs: ε in the last epoch (linear in between)")


@dataclass(frozen=True)
class GdasSettings(MethodSettings):
    """GDAS (`nas.methods.gdas`): the Gumbel-softmax temperature, linear over the epochs (the paper: 10 → 0.1)."""

    tau_max: float = setting(10.0, POSITIVE, "gdas: temperature τ of the Gumbel-softmax in the first epoch")
    tau_min: float = setting(0.1, POSITIVE, "gdas: τ in the last epoch (linear in between)")


@dataclass(frozen=True)
class DrnasSettings(MethodSettings):
    """DrNAS (`nas.methods.drnas`): the weight of the KL regulariser (0: the authors' default ℓ2 one, --arch-wdecay)."""

    dirichlet_kl: float = setting(
        0.0,
        NON_NEGATIVE,
        "drnas: weight λ of Σ KL(Dir(ELU(α)+1) ‖ Dir(1)) added to α's loss (the authors' 'kl' "
        "regulariser, 1e-3 in their code; 0: their default 'l2' one, which is --arch-wdecay)",
    )
