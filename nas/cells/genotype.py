"""The searched cell as a versioned JSON file: what the search writes and everything else reads.

A genotype lists, for nodes 1..N, the inputs of each node as `[op, predecessor]` pairs
(predecessor 0 is the first state s0), the nodes averaged into the output (`concat`), the
optional ESS inter-cell gates (`inter`, whose schema `nas.cells.gates` describes), the optional NASABN
attention type (`attention`) and the provenance of the cell. `validate` checks every field,
the gates' included, so everything that builds a cell starts from well-formed data. The value itself,
`Genotype`, is defined with the op table (`nas.cells.ops`), where the cells read it; this module is its file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from nas.cells.ops import (  # noqa: F401  (the genotype's value and schema, re-exported with its file format)
    ATTENTION_TYPES,
    FORMAT,
    GATES,
    INTER_FIELDS,
    OPS,
    SIZE_MATCHES,
    SQUASHES,
    VERSION,
    Genotype,
    predecessors,
)
from nas.common.errors import InputError
from nas.common.files import atomic_write_text, parse_json, read_json
from nas.common.presets import cell_recipe
from nas.common.ranges import NODES
from nas.common.resources import resources_dir


def save(genotype: Genotype, path: str | os.PathLike) -> None:
    """Write `genotype` to `path` as its JSON file (`Genotype.dumps`), atomically."""
    atomic_write_text(path, genotype.dumps())


def _fail(where: str, fieldname: str, problem: str) -> None:
    raise InputError(f"{where}: field '{fieldname}': {problem}")


def validate(data: Any, where: str) -> Genotype:
    """Check every field of a genotype dict; the first problem is an InputError naming the field."""
    if not isinstance(data, dict):
        _fail(where, "<root>", "a genotype is a JSON object")
    if data.get("format", FORMAT) != FORMAT:
        _fail(where, "format", f"expected '{FORMAT}', got {data.get('format')!r}")
    if data.get("version") != VERSION:
        _fail(where, "version", f"unknown version {data.get('version')!r} (this toolkit reads version {VERSION})")
    known = {"format", "version", "name", "nodes", "concat", "inter", "attention", "provenance"}
    for key in data:
        if key not in known:
            _fail(where, key, "unknown field")
    parsed = _nodes(data.get("nodes"), where)
    concat = _concat(data.get("concat"), len(parsed), where)
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        _fail(where, "name", "must be a string or null")
    attention = data.get("attention")
    if attention is not None and attention not in ATTENTION_TYPES:
        _fail(where, "attention", f"unknown attention {attention!r} (one of {', '.join(ATTENTION_TYPES)}, or null)")
    inter = data.get("inter")
    if inter is not None:
        validate_inter(inter, lambda f, p: _fail(where, f"inter.{f}" if f else "inter", p))
    provenance = data.get("provenance", {})
    if not isinstance(provenance, dict):
        _fail(where, "provenance", "must be a JSON object")
    return Genotype(tuple(parsed), tuple(concat), inter, attention, name, provenance)


def _nodes(nodes: Any, where: str) -> list[tuple[tuple[str, int], ...]]:
    """A genotype's `nodes`, checked: per node i, its (op, predecessor) inputs, each predecessor in 0..i-1."""
    if not isinstance(nodes, list) or not nodes:
        _fail(where, "nodes", "must be a non-empty list of nodes")
    if len(nodes) > NODES.high:
        _fail(where, "nodes", f"{len(nodes)} nodes; a cell has at most {NODES.high:g} (as bin/search-lm --nodes)")
    parsed = []
    for i, node in enumerate(nodes, start=1):
        label = f"nodes[{i - 1}]"
        if not isinstance(node, list) or not node:
            _fail(where, label, f"node {i} must be a non-empty list of [op, predecessor] inputs")
        if len(node) > i * len(OPS[1:]):
            _fail(
                where,
                label,
                f"node {i} has {len(node)} inputs, more than the {i * len(OPS[1:])} distinct "
                f"[op, predecessor] pairs it can have",
            )
        inputs = []
        for k, item in enumerate(node):
            if not (isinstance(item, list) and len(item) == 2):
                _fail(where, f"{label}[{k}]", "an input is a pair [op, predecessor]")
            op, pred = item
            if op not in OPS or op == "none":
                _fail(where, f"{label}[{k}]", f"unknown op {op!r} (ops: {', '.join(OPS[1:])})")
            if isinstance(pred, bool) or not isinstance(pred, int) or not 0 <= pred < i:
                _fail(where, f"{label}[{k}]", f"predecessor {pred!r} of node {i} must be an integer in 0..{i - 1}")
            inputs.append((op, pred))
        parsed.append(tuple(inputs))
    return parsed


def _concat(concat: Any, nodes: int, where: str) -> list[int]:
    """A genotype's `concat`, checked: distinct node numbers in 1..`nodes`."""
    if not isinstance(concat, list) or not concat:
        _fail(where, "concat", "must be a non-empty list of node numbers")
    for c in concat:
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= nodes:
            _fail(where, "concat", f"node {c!r} out of range 1..{nodes}")
    if len(set(concat)) != len(concat):
        _fail(where, "concat", "repeats a node")
    return concat


def validate_inter(inter: Any, fail: Callable[[str, str], None]) -> None:
    """Check a genotype's `inter` section; `fail(field, problem)` raises with the field named."""
    if not isinstance(inter, dict):
        fail("", "must be a JSON object with " + ", ".join(INTER_FIELDS) + ", or null")
    for key in inter:
        if key not in INTER_FIELDS:
            fail(key, "unknown field")
    for key in INTER_FIELDS:
        if key not in inter:
            fail(key, "missing")
    m = inter["history"]
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= NODES.high:
        fail("history", f"must be an integer in 1..{NODES.high:g}, got {m!r}")
    if inter["squash"] not in SQUASHES:
        fail("squash", f"unknown squash {inter['squash']!r} (one of {', '.join(SQUASHES)})")
    if inter["size_match"] not in SIZE_MATCHES:
        fail("size_match", f"unknown size matching {inter['size_match']!r} (one of {', '.join(SIZE_MATCHES)})")
    for gate in GATES:
        nodes = inter[gate]
        if not isinstance(nodes, list) or len(nodes) < m:
            fail(gate, f"must be a list of at least history = {m} nodes (node i reads history vector i)")
        if len(nodes) > NODES.high:
            fail(gate, f"{len(nodes)} nodes; a gate has at most {NODES.high:g} (as bin/search-lm --inter-nodes)")
        for i, node in enumerate(nodes, start=1):
            label = f"{gate}[{i - 1}]"
            if not isinstance(node, list) or not node:
                fail(label, f"node {i} must be a non-empty list of [op, predecessor] inputs")
            allowed = predecessors(m, i)
            if len(node) > len(allowed) * len(OPS[1:]):
                fail(
                    label,
                    f"node {i} has {len(node)} inputs, more than the {len(allowed) * len(OPS[1:])} distinct "
                    "[op, predecessor] pairs it can have",
                )
            for k, item in enumerate(node):
                if not (isinstance(item, list) and len(item) == 2):
                    fail(f"{label}[{k}]", "an input is a pair [op, predecessor]")
                op, pred = item
                if op not in OPS or op == "none":
                    fail(f"{label}[{k}]", f"unknown op {op!r} (ops: {', '.join(OPS[1:])})")
                if isinstance(pred, bool) or not isinstance(pred, int) or pred not in allowed:
                    fail(
                        f"{label}[{k}]",
                        f"predecessor {pred!r} of node {i} must be one of {allowed} "
                        f"(0 is its history vector, only for nodes 1..{m})",
                    )


def shipped_cells() -> list[str]:
    return sorted(p.stem for p in (resources_dir() / "cells").glob("*.json"))


def load(spec: str | os.PathLike) -> Genotype:
    """Load a genotype from a path, or from a bare name found in resources/cells/."""
    path = Path(spec)
    if not os.path.lexists(path) and os.sep not in str(spec):
        cells = resources_dir() / "cells"
        for candidate in (
            cells / str(spec),
            cells / f"{spec}.json",
            cells / f"{str(spec).lower()}.json",
            cells / str(spec).lower(),
        ):
            if candidate.is_file():
                path = candidate
                break
        else:
            stem = Path(str(spec)).stem
            recipe = cell_recipe(stem)  # a file named like a search preset: that search makes it
            how = (
                f"Make it with `{recipe}`"
                if recipe
                else f"To make it, run a search, e.g. `bin/search-lm --method ess --data DIR --out {stem}.json`,"
            )
            raise InputError(
                f"cell '{spec}': no such file, and not a shipped cell (shipped: "
                f"{', '.join(shipped_cells())}). {how} and pass that file"
            )
    data = read_json(path)
    if isinstance(data, dict) and "format" not in data:  # a file says what it is; a dict inside a run may not
        _fail(
            str(path),
            "format",
            f"missing: a genotype file starts with \"format\": \"{FORMAT}\", \"version\": {VERSION}",
        )
    return validate(data, str(path))


def loads(text: str, where: str = "genotype") -> Genotype:
    return validate(parse_json(text, where), where)
