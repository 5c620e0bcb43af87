"""The search methods' own settings: a frozen dataclass per method whose fields are its flags.

They live here, not in the methods' modules, because the commands make their flags from them
before torch loads (the methods' modules import torch). Each field is declared with `setting`:
its default (from the method's paper), its allowed range, its help line. The commands make one
flag per field, `--` and the name with hyphens, for every registered method
(`nas.cli.method_flags`); config.json stores the chosen method's values under `method_settings`,
and `of` reads them back, checked, so a resumed run and the genotype's provenance keep them.
Light on purpose (no torch, no click).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, TypeVar

from nas.common.errors import InputError
from nas.common.ranges import NON_NEGATIVE, POSITIVE, Range, check_ranges
from nas.common.flags import flag_name

S = TypeVar("S", bound="MethodSettings")


def setting(default: float | int, allowed: Range, help: str) -> Any:
    """A field of a method's settings: its default, the range its flag and config.json must keep to, its help line."""
    return field(default=default, metadata={"range": allowed, "help": help})


@dataclass(frozen=True)
class SearchSettings:
    """What a search method reads of a search's settings, whichever task it searches on: the search layer's
    sizes, the α step's settings, the epochs its schedule spans, and the older methods' own fields (ESS's,
    random search's, ENAS's), besides `method_settings`, from which each method reads its own. The LM
    search takes them from its `nas.runs.config.SearchConfig` (`of`), the tagging search from its own config."""

    method: str
    seed: int
    epochs: int
    method_settings: dict[str, Any]
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
    # ESS
    search_space: str
    cell: dict | None
    intra_steps: int | None
    inter_steps: int | None
    arch_lr_intra: float
    arch_lr_inter: float
    history: int
    inter_nodes: int
    gate_squash: str
    gate_size_match: str
    # random search and ENAS
    candidates: int
    track_candidates: int
    controller_steps: int
    controller_lr: float
    entropy_weight: float
    baseline_decay: float

    @classmethod
    def of(cls, config: Any) -> "SearchSettings":
        """The fields of `config` (a `SearchConfig`) that a method reads."""
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class MethodSettings:
    """The settings only one method reads (none here: DARTS, I-DARTS and the methods whose settings
    are still `SearchConfig` fields); a method's subclass declares its own with `setting`."""

    @classmethod
    def ranges(cls) -> dict[str, Range]:
        return {f.name: f.metadata["range"] for f in fields(cls)}

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
