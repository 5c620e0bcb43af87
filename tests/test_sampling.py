"""nas.methods.sampling and bin/sample-cells: uniform draws from the search space, and cells that load and train."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from conftest import write_lm_corpus
from nas.cli.sample_cells import main as sample_cells
from nas.cli.train_lm import main as train_lm
from nas.cells.genotype import predecessors
from nas.cells.genotype import ATTENTION_TYPES, load, loads
from nas.lm.model_file import load_model_file
from nas.methods.sampling import CANDIDATE_OPS, Space, random_cells, sample
from nas.runs.config import SearchConfig

REPO = Path(__file__).resolve().parent.parent
DRAWS = 20_000


def chi_square_p(counts: list[int]) -> float:
    """P-value of Pearson's chi-square test of `counts` against equal probabilities.

    The chi-square survival function with k degrees of freedom is Q(k/2, x/2), the regularised
    upper incomplete gamma function (torch.special.gammaincc); checked below against known values.
    """
    n, k = sum(counts), len(counts)
    x = sum((c - n / k) ** 2 / (n / k) for c in counts)
    return float(
        torch.special.gammaincc(
            torch.tensor((k - 1) / 2, dtype=torch.float64), torch.tensor(x / 2, dtype=torch.float64)
        )
    )


def test_chi_square_p_value_against_known_values():
    assert chi_square_p([50, 50, 50]) == 1.0  # a perfect fit
    # x = (100² + 0 + 100²) / 1000 = 20 on 2 degrees of freedom, whose survival function is exp(-x/2)
    assert chi_square_p([1100, 1000, 900]) == pytest.approx(math.exp(-10), rel=1e-9)
    # 1 and 3 degrees of freedom at the tabulated critical values 3.841 (5%) and 11.345 (1%)
    for df, critical, p in ((1, 3.841458820694124, 0.05), (3, 11.344866730144373, 0.01)):
        assert float(
            torch.special.gammaincc(
                torch.tensor(df / 2, dtype=torch.float64), torch.tensor(critical / 2, dtype=torch.float64)
            )
        ) == pytest.approx(p, rel=1e-9)
    # the tests below reject a 6% tilt of 20,000 draws at their level 1%/26: x = (300² + 300²) / 5000 = 36 on 3 df
    assert chi_square_p([5300, 5000, 5000, 4700]) < 0.01 / 26


def _uniform_counts(counts: Counter, values: list) -> list[int]:
    assert set(counts) <= set(values), f"drew {set(counts) - set(values)}, outside {values}"
    return [counts[v] for v in values]


@pytest.mark.parametrize("rng", [random.Random(0), torch.Generator().manual_seed(0)], ids=["python", "torch"])
def test_every_choice_of_the_space_is_drawn_uniformly(rng):
    """20,000 draws: per node of the cell and of both gates, ops and predecessors do not reject
    uniformity (Pearson's chi-square), nor does the attention type, at 1% for the family of 26
    tests (Bonferroni: 1%/26 each; 26 tests at 1% each would reject a correct sampler one seed in four)."""
    space = Space(inter=True, attention=True)
    draws = [sample(space, rng) for _ in range(DRAWS)]
    tests = {}
    for i in range(1, space.nodes + 1):
        inputs = [g.nodes[i - 1] for g in draws]
        assert all(len(node) == 1 for node in inputs)
        tests[f"cell node {i} ops"] = _uniform_counts(Counter(n[0][0] for n in inputs), list(CANDIDATE_OPS))
        tests[f"cell node {i} predecessors"] = _uniform_counts(Counter(n[0][1] for n in inputs), list(range(i)))
    for gate in ("f", "g"):
        for i in range(1, space.inter_nodes + 1):
            inputs = [g.inter[gate][i - 1] for g in draws]
            tests[f"{gate} node {i} ops"] = _uniform_counts(Counter(n[0][0] for n in inputs), list(CANDIDATE_OPS))
            tests[f"{gate} node {i} predecessors"] = _uniform_counts(
                Counter(n[0][1] for n in inputs), predecessors(space.history, i)
            )
    tests["attention"] = _uniform_counts(Counter(g.attention for g in draws), list(ATTENTION_TYPES))
    assert {g.inter["history"] for g in draws} == {3} and {g.concat for g in draws} == {tuple(range(1, 9))}
    single = {name: counts for name, counts in tests.items() if len(counts) == 1}
    assert single == {
        "cell node 1 predecessors": [DRAWS],
        "f node 1 predecessors": [DRAWS],
        "g node 1 predecessors": [DRAWS],
    }  # node 1 reads s0 / its own history vector only
    assert len(tests) - len(single) == 26
    level = 0.01 / 26
    for name, counts in tests.items():
        if len(counts) > 1:
            assert chi_square_p(counts) > level, (name, counts)


def test_the_space_is_the_search_space_by_default():
    search = SearchConfig()
    space = Space()
    assert (space.nodes, space.history, space.inter_nodes, space.gate_squash, space.gate_size_match) == (
        search.nodes,
        search.history,
        search.inter_nodes,
        search.gate_squash,
        search.gate_size_match,
    )
    assert CANDIDATE_OPS == ("identity", "tanh", "relu", "sigmoid")
    plain = sample(space, random.Random(1))
    assert plain.inter is None and plain.attention is None and plain.steps == 8
    with pytest.raises(ValueError, match="history 4"):
        Space(history=4)


def test_a_seed_gives_one_sequence_of_cells_whatever_the_count():
    space = Space(nodes=4, inter=True)
    five, three = random_cells(space, 7, 5), random_cells(space, 7, 3)
    assert five[:3] == three and five[0] != five[1]
    assert random_cells(space, 8, 3) != three
    for index, cell in enumerate(five, start=1):
        assert loads(cell.dumps()) == cell and cell.name == f"random_7_{index}"
        assert {k: cell.provenance[k] for k in ("method", "seed", "index")} == {
            "method": "random",
            "seed": 7,
            "index": index,
        }


def _run(args: list[str]):
    return CliRunner().invoke(sample_cells, args)


def test_sample_cells_writes_n_loadable_files_and_the_same_seed_reproduces_them(tmp_path):
    out = tmp_path / "cells" / "random"
    result = _run(["--n", "3", "--seed", "5", "--out", str(out), "--nodes", "4", "--inter", "--attention"])
    assert result.exit_code == 0, result.output
    paths = [out / f"random_5_{i}.json" for i in (1, 2, 3)]
    assert result.stdout.split() == [str(p) for p in paths]
    assert sorted(out.iterdir()) == paths  # no temp files left behind
    cells = [load(p) for p in paths]
    assert cells == random_cells(Space(nodes=4, inter=True, attention=True), 5, 3)
    for index, cell in enumerate(cells, start=1):
        assert cell.steps == 4 and cell.inter is not None and cell.attention in ATTENTION_TYPES
        provenance = cell.provenance
        assert provenance["seed"] == 5 and provenance["index"] == index
        assert provenance["space"] == {
            "nodes": 4,
            "ops": ["identity", "tanh", "relu", "sigmoid"],
            "inter": {"history": 3, "inter_nodes": 3, "gate_squash": "sigmoid", "gate_size_match": "project"},
            "attention": ["dot", "multihead"],
        }
        assert provenance["command"].startswith("bin/sample-cells") and provenance["toolkit_version"]
        assert provenance["date"]
    first = [json.loads(p.read_text()) for p in paths]
    again = tmp_path / "again"
    assert (
        _run(["--n", "3", "--seed", "5", "--out", str(again), "--nodes", "4", "--inter", "--attention"]).exit_code == 0
    )
    for before, path in zip(first, paths):
        after = json.loads((again / path.name).read_text())
        for data in (before, after):
            del data["provenance"]["date"], data["provenance"]["command"]
        assert after == before
    assert _run(["--n", "3", "--seed", "6", "--out", str(again)]).exit_code == 0
    assert [load(again / f"random_6_{i}.json") for i in (1, 2, 3)] != cells


@pytest.mark.parametrize(
    "args, message",
    [
        (["--n", "0"], "error: --n: must be in [1, 1000000], got 0"),
        (["--n", "2", "--nodes", "0"], "error: --nodes: must be in [1, 32], got 0"),
    ],
)
def test_sample_cells_refuses_bad_counts_with_one_line(tmp_path, args, message):
    out = tmp_path / "cells"
    result = _run([*args, "--seed", "1", "--out", str(out)])
    assert result.exit_code == 2 and result.stderr == message + "\n" and not out.exists()


def test_sample_cells_help_does_not_import_torch():
    code = "import sys; import nas.cli.sample_cells; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def test_a_random_cell_with_gates_and_attention_trains_in_the_language_model(tmp_path):
    corpus = write_lm_corpus(tmp_path / "corpus", train_lines=60, other_lines=20)
    assert (
        _run(["--n", "1", "--seed", "3", "--out", str(tmp_path), "--nodes", "3", "--inter", "--attention"]).exit_code
        == 0
    )
    cell = tmp_path / "random_3_1.json"
    run = tmp_path / "lm"
    result = CliRunner().invoke(
        train_lm,
        [
            "--cell",
            str(cell),
            "--data",
            str(corpus),
            "--run-dir",
            str(run),
            "--emsize",
            "8",
            "--batch-size",
            "4",
            "--bptt",
            "6",
            "--epochs",
            "1",
            "--max-batches-per-epoch",
            "1",
            "--eval-batches",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    _, stored = load_model_file(run / "best.pt")
    trained = loads(json.dumps(stored["spec"]["genotype"]))
    assert trained == load(cell) and trained.inter is not None
    record = json.loads((run / "log.jsonl").read_text().splitlines()[-1])
    assert math.isfinite(record["train_ppl"]) and math.isfinite(record["valid_ppl"])
