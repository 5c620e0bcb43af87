"""The allowed values of numeric settings, declared once: the configs check them in `validate()` for
library callers, and the commands turn the same declarations into click types (`nas.common.cli`), so a
flag out of range is refused while the command line is parsed.

Light on purpose (no click, no torch)."""

from __future__ import annotations

import math
import os
import json
from dataclasses import dataclass, fields
from typing import Any, Callable, Collection, Mapping

from .errors import InputError


@dataclass(frozen=True)
class Range:
    """An interval of allowed numbers (None: unbounded on that side); every allowed number is finite."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the low end itself is not allowed
    high_open: bool = False
    integer: bool = False
    words: str | None = None  # how to say the range, when the interval alone says too little

    def describe(self) -> str:
        if self.words:
            return self.words
        low, high = self._say(self.low), self._say(self.high)
        if self.high is None:
            if self.low == 0:
                return "positive" if self.low_open else "non-negative"
            return f"{'above' if self.low_open else 'at least'} {low}"
        if self.low is None:
            return f"{'below' if self.high_open else 'at most'} {high}"
        return f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"

    def _say(self, bound: float | None) -> str:
        if bound is None:
            return ""
        return f"{bound:.0f}" if self.integer else f"{bound:g}"

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` (None: nothing; None is also what an unset optional setting is)."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):  # a config.json edited by hand
            return f"must be {'an integer' if self.integer else 'a number'}, got {_json(value)}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        if self.integer and isinstance(value, float) and not value.is_integer():
            return f"must be an integer, got {value!r}"
        too_low = self.low is not None and (value < self.low or (self.low_open and value == self.low))
        too_high = self.high is not None and (value > self.high or (self.high_open and value == self.high))
        return f"must be {self.describe()}, got {value}" if too_low or too_high else None


AT_LEAST_1 = Range(1, integer=True)  # sizes and counts
NON_NEGATIVE_INT = Range(0, integer=True)
POSITIVE = Range(0, low_open=True)  # learning rates, clipping norms
NON_NEGATIVE = Range(0)  # weight decays, regularisation factors
RATE = Range(0, 1, high_open=True)  # dropout probabilities
FACTOR = Range(0, 1, low_open=True, high_open=True)  # a factor that must shrink what it multiplies
MINUTES = Range(0, low_open=True, words="a positive number of minutes")

# Upper limits, so that a number too large for the machine is refused before any work instead of
# dying in the allocator: far above what the papers use (sizes 300 to 1024, batches up to 256).
SIZE = Range(1, 8192, integer=True)  # embedding, hidden and vector sizes
BATCH = Range(1, 65536, integer=True)  # batch sizes and sequence lengths
NODES = Range(1, 32, integer=True)  # nodes of a cell or of a gate (DARTS 8, ENAS 12)
MANY = Range(1, 1_000_000, integer=True)  # counts of things made one by one (cells, seeds, candidates)
EPOCHS = Range(1, 1_000_000, integer=True)  # far above any schedule (DARTS retrains for 8000)
ITERATIONS = Range(0, 10_000, integer=True)  # power iterations per estimate (DARTS-ES: 20)
SEED = Range(0, 2**32 - 1, integer=True)  # numpy's and flair's seeds take no more (torch's would)
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
THREADS = Range(1, CORES, integer=True, words=f"in [1, {CORES}], the cores of this machine")


def check_ranges(
    settings: Any, ranges: dict[str, Range], flag: Callable[[str], str] = lambda name: "--" + name.replace("_", "-")
) -> None:
    """The first attribute of `settings` outside its declared range, as an InputError naming its flag."""
    for name, allowed in ranges.items():
        problem = allowed.problem(getattr(settings, name))
        if problem:
            raise InputError(f"{flag(name)}: {problem}")


def _json(value: Any) -> str:
    try:
        return json.dumps(value)[:80]
    except (TypeError, ValueError):
        return repr(value)[:80]


# A stored setting's JSON type, by the annotation of its field (`from __future__ import annotations`
# keeps annotations as text): what `check_stored` accepts for each.
_JSON_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "int": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "str": ((str,), "a string"),
    "bool": ((bool,), "true or false"),
    "dict": ((dict,), "an object"),
    "list": ((list,), "a list"),
    "tuple": ((list,), "a list"),
    "None": ((type(None),), "null"),
}


def check_stored(
    cls: type,
    stored: Mapping[str, Any],
    where: str,
    choices: Mapping[str, Collection[str]] | None = None,
    ranges: Mapping[str, Range] | None = None,
) -> None:
    """Each setting a run's config.json (`stored`, read from `where`) holds for a field of the dataclass
    `cls`, of the JSON type the field declares and, for those in `choices` or `ranges`, one of its values:
    the first that is not is an InputError naming the file and the setting, before any of them is used."""
    for item in fields(cls):
        if item.name not in stored:
            continue
        value = stored[item.name]
        kinds = [_JSON_TYPES.get(part.strip().split("[")[0]) for part in str(item.type).split("|")]
        if all(kinds):
            allowed = tuple(t for types, _ in kinds for t in types)
            wrong = isinstance(value, bool) and bool not in allowed
            if wrong or not isinstance(value, allowed):
                said = " or ".join(words for _, words in kinds)
                raise InputError(f"{where}: setting {item.name!r}: must be {said}, got {_json(value)}")
        allowed_range = (ranges or {}).get(item.name)
        problem = allowed_range.problem(value) if allowed_range is not None else None
        if problem:
            raise InputError(f"{where}: setting {item.name!r}: {problem}")
        options = (choices or {}).get(item.name)
        if options is not None and value is not None and value not in options:
            raise InputError(
                f"{where}: setting {item.name!r}: {_json(value)} is not one of {', '.join(map(repr, options))}"
            )


_MISSING = object()


def field_value(
    data: Any, name: str, where: str, kind: str = "number", allowed: Range | None = None, default: Any = _MISSING
) -> Any:
    """The field `name` ("test.f1": a path through objects) of JSON `data` read from `where`, checked:
    `kind` "number" (finite, and within `allowed`), "object", "list" or "any"; missing, it is `default`
    when one is given. Anything else is an InputError naming the file and the field."""
    value = data
    for part in name.split("."):
        if not isinstance(value, dict):
            raise InputError(f"{where}: field {name!r}: must be inside an object, got {_json(value)}")
        value = value.get(part, _MISSING)
        if value is _MISSING:
            if default is not _MISSING:
                return default
            raise InputError(f"{where}: field {name!r}: missing")
    expected = {"number": (int, float), "object": dict, "list": list, "any": object}[kind]
    if not isinstance(value, expected) or (kind == "number" and isinstance(value, bool)):
        words = {"number": "a number", "object": "an object", "list": "a list"}[kind]
        raise InputError(f"{where}: field {name!r}: must be {words}, got {_json(value)}")
    if kind == "number":
        problem = (allowed or Range()).problem(value)
        if problem:
            raise InputError(f"{where}: field {name!r}: {problem}")
    return value
