"""Round three of the bad-input matrix (tests/test_bad_inputs.py): links where a command writes in
place or at an output flag, run and model files damaged field by field, values that were accepted
silently, files of another kind named as what they are, a resume that fails before its first
checkpoint, a model file that names code for flair's own loaders, and SIGTERM during a write. Same
rule: exit 2, one `error:` line naming the file (and the field) or the flag, no traceback, nothing on
stdout, nothing written and nothing of the user's changed.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import tagger_data as td
from conftest import write_lm_corpus
from test_bad_inputs import COMMANDS, REPO, _assert_refused, _tree, assert_refused_leaving_nothing
from test_full_disk import disk, fill, refused  # noqa: F401 - disk is a fixture
from tagger.cli import search_tagger, transfer

COMMANDS = {**COMMANDS, "transfer": transfer.main, "search-tagger": search_tagger.main}
pytestmark = pytest.mark.usefixtures("restore_flair_logging")
LM = "--data {fx}/lm --emsize 8 --nhid 8 --batch-size 4 --bptt 5"
TINY_LM = [
    "--emsize",
    "8",
    "--nhid",
    "8",
    "--batch-size",
    "4",
    "--bptt",
    "5",
    "--max-batches-per-epoch",
    "2",
    "--eval-batches",
    "1",
    "--epochs",
    "1",
]
TAGGER = "--corpus conll03 --data {fx}/tagdata --embeddings glove:{fx}/vectors.txt"
TRANSFER = (
    "--cells lstm --corpora conll03:{fx}/tagdata --seeds 1 --run-dir {fx}/{run} -- --embeddings glove:{fx}/vectors.txt"
)
LINK = "not a file of its own; writing it would write there: remove it and run again"
HARD = "a hard link (one file under 2 names); writing it would change the others too: remove it and run again"
CASES = [
    # a run's lock and the files it appends to are its own, never links to files elsewhere (issue 70, 2)
    ("train-lm", "--resume {fx}/lm-locklink", "{fx}/lm-locklink/.lock: a symbolic link (to {fx}/user.txt), " + LINK),
    ("train-lm", "--resume {fx}/lm-lockdangling", "{fx}/lm-lockdangling/.lock: a symbolic link (to {fx}/gone.txt)"),
    ("train-lm", "--resume {fx}/lm-lockhard", "{fx}/lm-lockhard/.lock: " + HARD),
    ("train-lm", "--resume {fx}/lm-lockdir", "{fx}/lm-lockdir/.lock: a folder, not a file; remove it and run again"),
    ("train-lm", "--resume {fx}/lm-lockfifo", "{fx}/lm-lockfifo/.lock: not a regular file; remove it and run again"),
    ("train-lm", "--resume {fx}/lm-loglink", "{fx}/lm-loglink/log.jsonl: a symbolic link (to {fx}/user.txt), " + LINK),
    ("train-lm", "--resume {fx}/lm-loghard", "{fx}/lm-loghard/log.jsonl: " + HARD),
    ("train-lm", "--resume {fx}/lm-locklink --epochs 3", "{fx}/lm-locklink/.lock: a symbolic link"),
    ("search-lm", "--resume {fx}/s-locklink", "{fx}/s-locklink/.lock: a symbolic link (to {fx}/user.txt), " + LINK),
    ("search-lm", "--resume {fx}/s-loglink --epochs 2", "{fx}/s-loglink/log.jsonl: a symbolic link"),
    ("search-lm", "--resume {fx}/s-lockhard", "{fx}/s-lockhard/.lock: " + HARD),
    ("train-tagger", "--resume {fx}/t-locklink", "{fx}/t-locklink/.lock: a symbolic link (to {fx}/user.txt), " + LINK),
    ("train-tagger", "--resume {fx}/t-lockdangling", "{fx}/t-lockdangling/.lock: a symbolic link (to {fx}/gone.txt)"),
    ("train-tagger", "--resume {fx}/t-losslink", "{fx}/t-losslink/loss.tsv: a symbolic link (to {fx}/user.txt)"),
    ("train-tagger", "--resume {fx}/t-loghard", "{fx}/t-loghard/training.log: " + HARD),
    # a symbolic link loop, or a link to nothing, at an output flag says so (it was "File exists")
    ("plot-cell", "darts_v2 --out {fx}/loop", "--out: {fx}/loop: a symbolic link loop"),
    ("plot-cell", "darts_v2 --out {fx}/dangling", "--out: {fx}/dangling: a symbolic link to nothing ({fx}/gone.txt)"),
    ("sample-cells", "--n 1 --out {fx}/loop", "--out: {fx}/loop: a symbolic link loop"),
    ("plot-run", "{fx}/lmrun --out {fx}/loop", "--out: {fx}/loop: a symbolic link loop"),
    ("plot-search", "{fx}/searchrun --out {fx}/dangling", "--out: {fx}/dangling: a symbolic link to nothing"),
    ("search-lm", f"{LM} --out {{fx}}/loop", "--out: {fx}/loop: a symbolic link loop"),
    ("export", "{fx}/nope.pt --out {fx}/loop", "--out: {fx}/loop: a symbolic link loop"),
    ("tag", "{fx}/text.txt --model {fx}/nope.pt --out {fx}/dangling", "--out: {fx}/dangling: a symbolic link to"),
    (
        "evaluate",
        "--model {fx}/nope.pt --corpus conll03 --data {fx}/tagdata --out {fx}/loop",
        "--out: {fx}/loop: a symbolic link loop",
    ),
    ("train-wordvec", "--data {fx}/text.txt --out {fx}/loop", "--out: {fx}/loop: a symbolic link loop"),
    ("train-lm", f"{LM} --run-dir {{fx}}/loop", "--run-dir: {fx}/loop: a symbolic link loop"),
    ("train-tagger", f"{TAGGER} --run-dir {{fx}}/dangling", "--run-dir: {fx}/dangling: a symbolic link to nothing"),
    ("train-charlm", "--data {fx}/text.txt --epochs 1 --run-dir {fx}/loop", "--run-dir: {fx}/loop: a symbolic link"),
    ("demo", "--run-dir {fx}/dangling", "--run-dir: {fx}/dangling: a symbolic link to nothing"),
    # a run's config.json is checked field by field on --resume, naming the file and the setting (5, 6)
    ("search-lm", "--resume {fx}/s-nodes", "{fx}/s-nodes/config.json: setting 'nodes': must be an integer, got \"2\""),
    ("search-lm", "--resume {fx}/s-settings", "{fx}/s-settings/config.json: setting 'method_settings': must be an"),
    ("train-lm", "--resume {fx}/lm-lr", "{fx}/lm-lr/config.json: setting 'lr': must be a number, got \"fast\""),
    ("train-lm", "--resume {fx}/lm-epochs", "{fx}/lm-epochs/config.json: setting 'epochs': must be an integer, got"),
    ("train-lm", "--resume {fx}/lm-bool", "{fx}/lm-bool/config.json: setting 'emsize': must be an integer, got true"),
    ("train-lm", "--resume {fx}/lm-fp64", "{fx}/lm-fp64/config.json: setting 'precision': \"fp64\" is not one of"),
    ("train-lm", "--resume {fx}/lm-gemm", "{fx}/lm-gemm/config.json: setting 'gemm': \"blas\" is not one of"),
    ("train-tagger", "--resume {fx}/t-hidden", "{fx}/t-hidden/config.json: setting 'hidden_size': must be an integer"),
    ("train-tagger", "--resume {fx}/t-optimizer", "{fx}/t-optimizer/config.json: setting 'optimizer': \"rmsprop\""),
    (
        "train-tagger",
        "--resume {fx}/t-seed",
        "{fx}/t-seed/config.json: setting 'seed': must be an integer, got \"one\"",
    ),
    # a setting edited in config.json is named as the file's, not as a flag the user never typed (7)
    ("train-lm", "--resume {fx}/lm-device", "{fx}/lm-device/config.json: setting 'device': unknown device 'tpu'"),
    (
        "search-lm",
        "--resume {fx}/s-early",
        "{fx}/s-early/config.json: setting 'early_stop' hessian: needs the eigenvalue, so --hessian-iterations",
    ),
    ("search-lm", f"{LM} --hessian-iterations 100000", "--hessian-iterations: must be in [0, 10000], got 100000"),
    (
        "export",
        "{fx}/t-seed --rebuild-memory --out {out}",
        "{fx}/t-seed/config.json: setting 'seed': must be an integer, got \"one\"",
    ),
    (
        "evaluate",
        "--model {fx}/t-seed --corpus conll03 --data {fx}/tagdata --out {out}",
        "{fx}/t-seed/config.json: setting 'seed': must be an integer",
    ),
    # bin/transfer reads each finished run's metrics.json field by field before it writes anything (5)
    ("transfer", TRANSFER.replace("{run}", "tr-nan"), "seed-1/metrics.json: field 'test.f1': must be a finite number"),
    ("transfer", TRANSFER.replace("{run}", "tr-inf"), "seed-1/metrics.json: field 'hidden_size': must be a finite"),
    ("transfer", TRANSFER.replace("{run}", "tr-str"), "seed-1/metrics.json: field 'test.f1': must be a number, got"),
    ("transfer", TRANSFER.replace("{run}", "tr-empty"), "seed-1/metrics.json: field 'hidden_size': missing"),
    ("transfer", TRANSFER.replace("{run}", "tr-list"), "seed-1/metrics.json: not a run's metrics (a JSON object"),
    ("transfer", TRANSFER.replace("{run}", "tr-notest"), "seed-1/metrics.json: field 'test.f1': missing"),
    ("transfer", TRANSFER.replace("{run}", "tr-epoch"), "seed-1/metrics.json: field 'dev_f1_by_epoch[1]': must be"),
    # a model file is checked field by field before flair rebuilds it: pooled memory, names, embeddings (5, 6)
    (
        "tag",
        "{fx}/text.txt --model {fx}/pool-nan.pt --out {out}",
        "{fx}/pool-nan.pt: field 'embeddings.embeddings[1].memory.vectors': 1 value that is not finite (NaN or inf)",
    ),
    ("tag", "{fx}/text.txt --model {fx}/pool-inf.pt --out {out}", "memory.vectors': 2 values that are not finite"),
    (
        "tag",
        "{fx}/text.txt --model {fx}/pool-count.pt --out {out}",
        "{fx}/pool-count.pt: field 'embeddings.embeddings[1].memory.counts': a count of -3",
    ),
    ("tag", "{fx}/text.txt --model {fx}/pool-twice.pt --out {out}", "memory.words': 'to' is there twice"),
    ("tag", "{fx}/text.txt --model {fx}/pool-emptyword.pt --out {out}", "memory.words[2]': must be a word"),
    (
        "tag",
        "{fx}/text.txt --model {fx}/pool-emptyname.pt --out {out}",
        "{fx}/pool-emptyname.pt: field 'embeddings.embeddings[1].name': must be a name (a non-empty string), got ''",
    ),
    ("tag", "{fx}/text.txt --model {fx}/pool-intname.pt --out {out}", "embeddings[1].name': must be a name"),
    ("tag", "{fx}/text.txt --model {fx}/pool-width.pt --out {out}", "memory.vectors': 13 vectors for 14 words"),
    (
        "tag",
        "{fx}/text.txt --model {fx}/pool-noemb.pt --out {out}",
        "{fx}/pool-noemb.pt: field 'embeddings': missing (the model was saved without its embeddings",
    ),
    (
        "tag",
        "{fx}/text.txt --model {fx}/pool-deep.pt --out {out}",
        "{fx}/pool-deep.pt: a model state nested more than 64 levels deep; not a model file",
    ),
    ("export", "{fx}/pool-nan.pt --out {out}", "{fx}/pool-nan.pt: field 'embeddings.embeddings[1].memory.vectors'"),
    ("export", "{fx}/pool-deep.pt --out {out}", "{fx}/pool-deep.pt: a model state nested more than 64 levels"),
    (
        "evaluate",
        "--model {fx}/pool-count.pt --corpus conll03 --data {fx}/tagdata --out {out}",
        "memory.counts': a count of -3",
    ),
    # a file of another kind is named as what it is (7)
    ("tag", "{fx}/text.txt --model {fx}/real.safetensors --out {out}", "{fx}/real.safetensors: a safetensors file"),
    ("eval-lm", "{fx}/real.safetensors --file {fx}/text.txt", "{fx}/real.safetensors: a safetensors file (bare"),
    (
        "tag",
        "{fx}/text.txt --model {fx}/script.pt --out {out}",
        "{fx}/script.pt: a TorchScript program (torch.jit.save), not a model file of this toolkit",
    ),
    ("eval-lm", "{fx}/script.pt --file {fx}/text.txt", "{fx}/script.pt: a TorchScript program"),
    ("export", "{fx}/script.pt --out {out}", "{fx}/script.pt: a TorchScript program"),
    (
        "tag",
        "{fx}/text.txt --model {fx}/states.pt --out {out}",
        "{fx}/states.pt: character-LM states (the cache of a character LM's outputs that --charlm-states keeps), "
        "not a tagger model",
    ),
    (
        "tag",
        "{fx}/text.txt --model {fx}/flair.pt --out {out}",
        "{fx}/flair.pt: a model saved by flair itself, which this toolkit's commands do not read: in Python, "
        "`import tagger` first",
    ),
]


def _lm_run(root: Path, name: str, command: str, data: Path) -> Path:
    run = root / name
    args = ["--data", str(data), *TINY_LM, "--run-dir", str(run)]
    if command == "search-lm":
        args += ["--nodes", "2"]
    result = CliRunner().invoke(COMMANDS[command], args)
    assert result.exit_code == 0, result.stderr
    return run


def _edited(source: Path, target: Path, **settings) -> Path:
    shutil.copytree(source, target, symlinks=True)
    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    (target / "config.json").write_text(json.dumps({**config, **settings}), encoding="utf-8")
    return target


def _pooled_model(root: Path) -> Path:
    """A small untrained tagger on GloVe-style vectors and pooled Flair embeddings, its memory filled."""
    from tagger.config import TaggerConfig
    from tagger.corpora import load_corpus, to_sentences
    from tagger.embeddings import build_embeddings
    from tagger.prediction import predict_entities
    from tagger.train import build_model

    corpus = load_corpus("conll03", root / "tagdata")
    fwd, bwd = td.tiny_char_lm(root / "fwd.pt", True), td.tiny_char_lm(root / "bwd.pt", False)
    vectors = td.write_vectors(root / "pooled-vectors.txt")
    model = build_model(
        TaggerConfig(hidden_size=4), corpus, build_embeddings(f"glove:{vectors},pooled-flair:{fwd}:{bwd}"), None
    )
    predict_entities(model, to_sentences(corpus.dev, "ner")[:3], 8)
    model.save(root / "pooled.pt")
    return root / "pooled.pt"


def _damaged_models(root: Path, pooled: Path) -> None:
    state = torch.load(pooled, weights_only=False)

    def memory(s):
        return s["embeddings"]["embeddings"][1]["memory"]

    def deep(s):
        nested: dict = {"__cls__": "WordEmbeddings"}
        for _ in range(3000):
            nested = {"__cls__": "StackedEmbeddings", "embeddings": [nested]}
        s["embeddings"] = nested

    edits = {
        "nan": lambda s: memory(s)["vectors"].__setitem__((0, 0), math.nan),
        "inf": lambda s: memory(s)["vectors"][1].__setitem__(slice(0, 2), math.inf),
        "count": lambda s: memory(s)["counts"].__setitem__(0, -3),
        "twice": lambda s: memory(s)["words"].__setitem__(1, memory(s)["words"][0]),
        "emptyword": lambda s: memory(s)["words"].__setitem__(2, ""),
        "emptyname": lambda s: s["embeddings"]["embeddings"][1].__setitem__("name", ""),
        "intname": lambda s: s["embeddings"]["embeddings"][1].__setitem__("name", 3),
        "width": lambda s: memory(s).__setitem__("vectors", memory(s)["vectors"][1:]),
        "noemb": lambda s: s.pop("embeddings"),
        "deep": deep,
    }
    assert len(memory(state)["words"]) == 14 and memory(state)["words"][0] == "to"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # torch.save pickles by recursion; the loaders must not
    try:
        for name, edit in edits.items():
            damaged = copy.deepcopy(state)
            edit(damaged)
            torch.save(damaged, root / f"pool-{name}.pt")
    finally:
        sys.setrecursionlimit(limit)


def _metrics(**changes) -> dict:
    good = {
        "hidden_size": 16,
        "rnn_parameters": 100,
        "epochs": 2,
        "seconds_per_epoch": {"train": 1.0},
        "dev": {"f1": 0.5},
        "test": {"f1": 0.5},
        "dev_f1_by_epoch": [0.4, 0.5],
    }
    return {**good, **changes}


@pytest.fixture(scope="module")
def fx(tmp_path_factory, tiny_tagger) -> Path:
    root = tmp_path_factory.mktemp("inputs")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        lm = write_lm_corpus(root / "lm", train_lines=40, other_lines=10)
        lmrun = _lm_run(root, "lmrun", "train-lm", lm)
        searchrun = _lm_run(root, "searchrun", "search-lm", lm)
    finally:
        os.chdir(cwd)
    td.write_conll03(root / "tagdata")
    (root / "vectors.txt").write_text("a 0.1 0.2\n", encoding="utf-8")
    (root / "text.txt").write_text("George Washington went to Washington .\n", encoding="utf-8")
    user = root / "user.txt"
    user.write_text("the user's own file\n", encoding="utf-8")
    (root / "loop").symlink_to(root / "loop")
    (root / "dangling").symlink_to(root / "gone.txt")
    tagrun = root / "tagrun"
    shutil.copytree(tiny_tagger[0], tagrun)
    (tagrun / "metrics.json").unlink()  # an unfinished run, as --resume takes
    for kind, source in (("lm", lmrun), ("s", searchrun), ("t", tagrun)):
        for case in ("locklink", "lockdangling", "lockhard", "lockdir", "lockfifo", "loglink", "loghard"):
            run = root / {"t-loglink": "t-losslink"}.get(f"{kind}-{case}", f"{kind}-{case}")
            shutil.copytree(source, run)
            own = root / f"user-{kind}-{case}.txt"  # a file of its own for each hard link: 2 names
            own.write_text("another file of the user's\n", encoding="utf-8")
            target = run / {
                "loglink": "loss.tsv" if kind == "t" else "log.jsonl",
                "loghard": "training.log" if kind == "t" else "log.jsonl",
            }.get(case, ".lock")
            target.unlink(missing_ok=True)
            if case in ("locklink", "loglink"):
                target.symlink_to(user)
            elif case == "lockdangling":
                target.symlink_to(root / "gone.txt")
            elif case in ("lockhard", "loghard"):
                os.link(own, target)
            elif case == "lockdir":
                target.mkdir()
            else:
                os.mkfifo(target)
    for name, source, settings in (
        ("s-nodes", searchrun, {"nodes": "2"}),
        ("s-settings", searchrun, {"method_settings": None}),
        ("lm-lr", lmrun, {"lr": "fast"}),
        ("lm-epochs", lmrun, {"epochs": [3]}),
        ("lm-bool", lmrun, {"emsize": True}),
        ("lm-fp64", lmrun, {"precision": "fp64"}),
        ("lm-gemm", lmrun, {"gemm": "blas"}),
        ("lm-device", lmrun, {"device": "tpu"}),
        ("s-early", searchrun, {"early_stop": "hessian", "hessian_iterations": 0}),
        ("t-hidden", tagrun, {"hidden_size": "16"}),
        ("t-optimizer", tagrun, {"optimizer": "rmsprop"}),
        ("t-seed", tagrun, {"seed": "one"}),
    ):
        _edited(source, root / name, **settings)
    for name, metrics in (
        ("nan", _metrics(test={"f1": math.nan})),
        ("inf", _metrics(hidden_size=math.inf)),
        ("str", _metrics(test={"f1": "high"})),
        ("empty", {}),
        ("list", [0.5]),
        ("notest", {k: v for k, v in _metrics().items() if k != "test"}),
        ("epoch", _metrics(dev_f1_by_epoch=[0.4, "x"])),
    ):
        seed = root / f"tr-{name}" / "conll03" / "lstm" / "seed-1"
        seed.mkdir(parents=True)
        (seed / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    _damaged_models(root, _pooled_model(root))
    from safetensors.torch import save_file

    save_file({"weight": torch.ones(2, 2)}, str(root / "real.safetensors"))
    torch.jit.script(torch.nn.Linear(2, 2)).save(str(root / "script.pt"))
    torch.save(
        {"format": "nas_charlm_states", "version": 1, "lm": "x", "sentences": [], "lengths": torch.zeros(0)},
        root / "states.pt",
    )
    td.tiny_char_lm(root / "flair.pt", forward=True)
    return root


@pytest.mark.parametrize("command, args, expected", CASES)
def test_bad_input_is_one_error_line_exit_2_and_leaves_nothing(fx, tmp_path, monkeypatch, command, args, expected):
    assert_refused_leaving_nothing(COMMANDS[command], fx, tmp_path, monkeypatch, args, expected)


def test_the_matrix_grew_by_sixty_cases():
    assert len(CASES) >= 60


# -- flair's own loaders, after `import tagger`, run no pickled code (issue 70, 1) ---------------------


class _Runs:
    """A pickle that names code: os.system, touching the file given."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Execs(_Runs):
    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def _crafted(folder: Path, kind: str) -> tuple[Path, Path]:
    """(a crafted model file of `kind`, the file its code would make)."""
    marker = folder / f"ran-{kind}"
    path = folder / f"{kind}.pt"
    if kind == "system":
        torch.save({"tag_dictionary": _Runs(marker), "__cls__": "SequenceTagger"}, path)
    elif kind == "system-protocol-4":  # flair's own protocol
        torch.save({"tag_dictionary": _Runs(marker)}, path, pickle_protocol=4)
    elif kind == "exec":
        torch.save({"embeddings": _Execs(marker)}, path, pickle_protocol=4)
    elif kind == "module":  # a whole nn.Module pickled, as old flair models are
        torch.save({"__cls__": "SequenceTagger", "rnn": torch.nn.Linear(2, 2)}, path)
    elif kind == "path":  # a model card holding a pathlib.Path, as flair's trainer writes
        torch.save({"__cls__": "SequenceTagger", "model_card": {"base_path": Path("/x")}}, path, pickle_protocol=4)
    else:
        assert kind == "tagger-marked"
        torch.save({"nas_tagger_format": 2, "tag_dictionary": _Runs(marker)}, path)
    return path, marker


FLAIR_LOADERS = ("SequenceTagger.load", "Classifier.load")
CRAFTED = ("system", "system-protocol-4", "exec", "module", "path", "tagger-marked")
REFUSED = {
    "system": "posix.system",
    "system-protocol-4": "posix.system",
    "exec": "builtins.exec",
    "module": "torch.nn.modules.linear.Linear",
    "path": "pathlib.PosixPath",
    "tagger-marked": "posix.system",
}


@pytest.mark.parametrize("loader", FLAIR_LOADERS)
@pytest.mark.parametrize("kind", CRAFTED)
def test_flairs_loaders_refuse_a_file_that_names_code_in_one_line_and_run_none(tmp_path, loader, kind):
    import tagger  # noqa: F401 - what makes flair's loaders safe
    from flair.models import SequenceTagger
    from flair.nn import Classifier

    from nas.common.errors import InputError

    path, marker = _crafted(tmp_path, kind)
    load = {"SequenceTagger.load": SequenceTagger.load, "Classifier.load": Classifier.load}[loader]
    with pytest.raises(InputError) as refused_:
        load(path)
    line = str(refused_.value)
    assert "\n" not in line and line.startswith(f"{path}: refused: its pickle names {REFUSED[kind]}"), line
    assert "code that loading it would run" in line
    assert not marker.exists()


def test_a_model_flair_saved_that_needs_nothing_more_still_loads_with_flairs_loaders(tmp_path):
    """flair's own save (protocol 4, its own classes named by `__cls__` only) reads through the safe
    loader: the same predictions as the model saved."""
    import tagger  # noqa: F401
    from flair.data import Dictionary
    from flair.models import SequenceTagger
    from flair.nn import Classifier, Model

    from tagger.embeddings import build_embeddings

    tags = Dictionary()
    for tag in ("O", "B-PER", "E-PER", "S-PER"):
        tags.add_item(tag)
    torch.manual_seed(0)
    embeddings = build_embeddings(f"glove:{td.write_vectors(tmp_path / 'v.txt')}")
    model = SequenceTagger(hidden_size=4, embeddings=embeddings, tag_dictionary=tags, tag_type="ner")
    Model.save(model, tmp_path / "flair-saved.pt")  # flair's own save: pickle protocol 4
    assert (tmp_path / "flair-saved.pt").read_bytes()[:2] == b"PK"
    for load in (SequenceTagger.load, Classifier.load):
        loaded = load(tmp_path / "flair-saved.pt")
        assert type(loaded) is SequenceTagger
        assert torch.equal(loaded.linear.weight, model.linear.weight)


def test_export_says_to_load_after_import_tagger_in_its_help_and_its_line(tiny_tagger, tmp_path):
    """Nothing the toolkit prints leads to flair's loader without the import that makes it safe."""
    run, _ = tiny_tagger
    result = CliRunner().invoke(COMMANDS["export"], [str(run), "--out", str(tmp_path / "m.pt")])
    assert result.exit_code == 0, result.stderr
    assert f"wrote {tmp_path / 'm.pt'}: load it with flair.models.SequenceTagger.load after `import tagger`" in (
        result.stderr
    )
    help_text = CliRunner().invoke(COMMANDS["export"], ["--help"]).stdout
    loads = [line for line in help_text.splitlines() if "SequenceTagger.load(" in line]
    assert loads and all("import tagger;" in line for line in loads), loads


# -- a resume that fails before its first checkpoint changes nothing of the run (4) ---------------------


def _search_tagger_args(tmp_path: Path) -> list[str]:
    td.write_conll03(tmp_path / "data", sizes=(12, 4, 4))
    (tmp_path / "vectors.txt").write_text("Anna 0.1 0.2\nParis 0.3 0.1\n", encoding="utf-8")
    return [
        "--corpus",
        "conll03",
        "--data",
        str(tmp_path / "data"),
        "--embeddings",
        f"glove:{tmp_path / 'vectors.txt'}",
        "--hidden-size",
        "4",
    ]


@pytest.mark.parametrize("command", ["train-lm", "search-lm", "train-tagger", "search-tagger"])
def test_a_resume_refused_by_a_full_disk_changes_nothing_of_the_run(disk, tmp_path, monkeypatch, command):
    """A run with its checkpoint of epoch 1; the disk then has room for a config.json and a log line but
    not for the next checkpoint: the resume to a larger epoch limit is one line, and config.json, the
    logs and every other file of the run are byte for byte as before; with space again, the same
    resume goes on to the new limit."""
    monkeypatch.chdir(tmp_path)
    run = disk / "run"
    limit = "max_epochs" if command == "train-tagger" else "epochs"
    if command in ("train-lm", "search-lm"):
        data = write_lm_corpus(tmp_path / "lm", train_lines=40, other_lines=10)
        args = ["--data", str(data), *TINY_LM, *(["--nodes", "2"] if command == "search-lm" else [])]
    else:
        args = _search_tagger_args(tmp_path)
        args += ["--max-epochs", "1"] if command == "train-tagger" else ["--nodes", "2", "--epochs", "1"]
    if command == "train-tagger":  # it keeps no checkpoint once finished: the disk fills after epoch 1's
        fill(disk, 68 << 10)
        first = CliRunner().invoke(COMMANDS[command], [*args[:-1], "3", "--run-dir", str(run)])
        assert first.exit_code == 2 and (run / "checkpoint.pt").is_file(), first.stderr
    else:
        first = CliRunner().invoke(COMMANDS[command], [*args, "--run-dir", str(run)])
        assert first.exit_code == 0 and (run / "checkpoint.pt").is_file(), first.stderr
        fill(disk, (run / "checkpoint.pt").stat().st_size // 2)
    before = _tree(run)
    more = [f"--{limit.replace('_', '-')}", "4"]
    result = CliRunner().invoke(COMMANDS[command], ["--resume", str(run), *more])
    assert "no space left on the device" in refused(result, disk)
    assert _tree(run) == before
    (disk / "filler").unlink()
    again = CliRunner().invoke(COMMANDS[command], ["--resume", str(run), *more])
    assert again.exit_code == 0, again.stderr
    assert json.loads((run / "config.json").read_text(encoding="utf-8"))[limit] == 4


# -- SIGTERM while an output is written leaves no temp file beside it (8) -------------------------------


def test_sigterm_while_tag_writes_its_output_leaves_no_temp_file(tiny_tagger, tmp_path):
    run, data = tiny_tagger
    text = (data / "raw.txt").read_text(encoding="utf-8")
    (tmp_path / "big.txt").write_text(text * 40, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "bin" / "tag"),
            str(tmp_path / "big.txt"),
            "--model",
            str(run),
            "--out",
            str(out / "tagged.conll"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list(out.glob(".tagged.conll.*.tmp")):
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "Traceback" not in err
    assert list(out.iterdir()) == []


def test_a_bad_nas_resources_says_so_instead_of_an_empty_list_of_shipped_cells(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    for value, problem in ((tmp_path / "nope", "no such folder"), (tmp_path / "empty", "no cells/ in it")):
        monkeypatch.setenv("NAS_RESOURCES", str(value))
        result = CliRunner().invoke(COMMANDS["plot-cell"], ["darts_v2", "--out", str(tmp_path / "pictures")])
        _assert_refused(
            result.exit_code,
            result.stdout,
            result.stderr,
            f"NAS_RESOURCES={value}: {problem}; it names a resources/ folder (cells/, charlm/), or unset it",
        )
        assert not (tmp_path / "pictures").exists()


def test_the_seed_level_test_refuses_a_score_that_is_not_a_number():
    from tagger.significance import seed_level_test

    with pytest.raises(ValueError, match=r"seed-level test: score 2 of A is nan, not a finite number"):
        seed_level_test([0.8, math.nan, 0.7], [0.7, 0.7, 0.7])


def test_the_transfer_report_gives_no_t_test_p_for_the_same_difference_at_every_seed():
    from tagger.transfer import _paired, seed_test_markdown

    runs = [{"seed": 1, "test_f1": 0.80}, {"seed": 2, "test_f1": 0.85}]
    vs = _paired(runs, {1: 0.70, 2: 0.75})
    assert vs["p"] is None and vs["t"] is None
    row = {"corpus": "c", "cell": "x", "vs_lstm": vs, "vs_random": None}
    lines = seed_test_markdown([row])
    assert lines[-1].endswith("| n/a (the same Δ each seed) |"), lines[-1]


@pytest.mark.parametrize("damage", ["width", "nan"])
def test_character_lm_states_of_the_wrong_width_are_refused_when_read_not_after_an_epoch(tmp_path, damage):
    """A states file of this LM (its digest) whose states are 3 wide, or hold NaN: one line naming the file
    and the field when it is read, before any training (flair failed on it after a whole epoch)."""
    from test_charlm_states import _flair, _sentences

    from nas.common.errors import InputError
    from tagger.charlm_states import FORMAT, VERSION, StateTable, reuse_states

    embedding = _flair(td.tiny_char_lm(tmp_path / "fwd.pt", True))
    sentences = _sentences(2, 0)
    width = 3 if damage == "width" else embedding.embedding_length
    lengths = [len(s) for s in sentences]
    states = torch.zeros(sum(lengths), width)
    if damage == "nan":
        states[1, 0] = math.nan
    folder = tmp_path / "states"
    folder.mkdir()
    table = StateTable(embedding)
    path = table.file(folder)
    torch.save(
        {
            "format": FORMAT,
            "version": VERSION,
            "lm": table.digest,
            "sentences": ["\n".join(t.text for t in s.tokens) for s in sentences],
            "lengths": torch.tensor(lengths),
            "states": states,
        },
        path,
    )
    expected = (
        f"{path}: field 'states': shape ({sum(lengths)}, 3), but this LM's states are {embedding.embedding_length} wide"
        if damage == "width"
        else f"{path}: field 'states': values that are not finite"
    )
    with pytest.raises(InputError) as refused_:
        reuse_states(embedding, sentences, folder)
    assert str(refused_.value).startswith(expected), refused_.value
