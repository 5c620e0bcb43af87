"""Saved taggers are flair model files: flair's own API loads them and predicts what the saved model did,
the toolkit's loader reads them without running pickled code, and `bin/export` writes one file."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import tagger_data as td
from nas.common.errors import InputError
from nas.cells.genotype import load
from tagger.config import TaggerConfig
from tagger.corpora import load_corpus, to_sentences
from tagger.embeddings import build_embeddings
from tagger.model import CellTagger, load_tagger
from tagger.prediction import predict_entities
from tagger.train import build_model

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("restore_flair_logging")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A corpus and GloVe + character-LM embeddings (whose state holds flair Dictionaries)."""
    root = tmp_path_factory.mktemp("flair-loading")
    td.write_conll03(root / "data")
    corpus = load_corpus("conll03", root / "data")
    fwd, bwd = td.tiny_char_lm(root / "fwd.pt", True), td.tiny_char_lm(root / "bwd.pt", False)
    embeddings = build_embeddings(f"glove:{td.write_vectors(root / 'vectors.txt')},flair:{fwd}:{bwd}")
    return root, corpus, embeddings


def saved(setup, cell: str | None, name: str):
    """(path, sentences, entities with scores) of an untrained, seeded tagger saved to `name`."""
    root, corpus, embeddings = setup
    torch.manual_seed(0)
    model = build_model(TaggerConfig(hidden_size=8), corpus, embeddings, load(cell) if cell else None)
    sentences = to_sentences(corpus.dev, "ner")
    found = predict_entities(model, sentences, 8)
    assert any(found)  # random weights still predict entities, so equal predictions mean something
    model.save(root / name)
    return root / name, sentences, found


def test_an_lstm_tagger_loads_with_flairs_own_sequence_tagger(setup):
    from flair.models import SequenceTagger

    path, sentences, found = saved(setup, None, "lstm.pt")
    model = SequenceTagger.load(path)
    assert type(model) is SequenceTagger  # flair's own class, not the toolkit's
    assert predict_entities(model, sentences, 8) == found
    assert predict_entities(load_tagger(path), sentences, 8) == found


def test_a_cell_tagger_loads_through_flairs_api_once_the_toolkit_is_imported(setup):
    from flair.nn import Classifier

    path, sentences, found = saved(setup, "darts_v2", "darts.pt")
    for model in (CellTagger.load(path), Classifier.load(path), load_tagger(path)):
        assert type(model) is CellTagger and model.genotype == load("darts_v2")
        assert predict_entities(model, sentences, 8) == found


def test_export_writes_a_file_flair_alone_loads(setup, tmp_path):
    from tagger.cli.export import main

    path, sentences, found = saved(setup, None, "lstm-export.pt")
    result = CliRunner().invoke(main, [str(path), "--out", str(tmp_path / "exported.pt")])
    assert result.exit_code == 0, result.stderr
    assert "flair.models.SequenceTagger.load" in result.stderr
    words = [[token.text for token in sentence] for sentence in sentences]
    script = (
        "import json, sys\nfrom flair.data import Sentence\nfrom flair.models import SequenceTagger\n"
        f"model = SequenceTagger.load({str(tmp_path / 'exported.pt')!r})\n"
        f"sentences = [Sentence(w) for w in {words!r}]\nmodel.predict(sentences, mini_batch_size=8)\n"
        "print(json.dumps([[[s[0].idx - 1, s[-1].idx, s.tag] for s in x.get_spans('ner')] for x in sentences]))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('tagger', 'nas'))))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # flair alone, not the toolkit
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    spans, toolkit_modules = map(json.loads, proc.stdout.strip().splitlines()[-2:])
    assert toolkit_modules == []
    assert spans == [[[e.start, e.end, e.label] for e in entities] for entities in found]


def test_export_of_a_run_directory_round_trips(tiny_tagger, tmp_path):
    from tagger.cli.export import main
    from tagger.prediction import predict_tags

    run, data = tiny_tagger
    result = CliRunner().invoke(main, [str(run), "--out", str(tmp_path / "ner.pt")])
    assert result.exit_code == 0, result.stderr
    sentences = to_sentences(load_corpus("conll03", data / "conll03").test, "ner")
    recorded = [
        [line.split()[2] for line in block.splitlines()]
        for block in (run / "test.conll").read_text().strip().split("\n\n")
    ]
    assert predict_tags(CellTagger.load(tmp_path / "ner.pt"), sentences) == recorded


def test_a_model_of_format_1_loads_and_exports(setup, tmp_path):
    """Earlier versions stored the state re-encoded into plain containers; such files still load."""
    from flair.data import Dictionary

    from tagger.cli.export import main

    path, sentences, found = saved(setup, "darts_v2", "darts-v1.pt")
    state = torch.load(path, weights_only=False)

    def encode(obj):
        if isinstance(obj, Dictionary):
            return {
                "__flair_dictionary__": {
                    "items": [i.decode() for i in obj.idx2item],
                    "add_unk": obj.add_unk,
                    "multi_label": obj.multi_label,
                    "span_labels": obj.span_labels,
                }
            }
        if isinstance(obj, io.BytesIO):
            return {"__bytes__": torch.frombuffer(bytearray(obj.getvalue()), dtype=torch.uint8)}
        if isinstance(obj, dict):
            return type(obj)((k, encode(v)) for k, v in obj.items())
        return type(obj)(map(encode, obj)) if isinstance(obj, (list, tuple)) else obj

    card = state.pop("model_card", None)
    del state["nas_tagger_format"]
    torch.save(
        {"format": "nas-tagger-model", "version": 1, "state": encode(state), "model_card": json.dumps(card)},
        tmp_path / "old.pt",
    )
    assert predict_entities(load_tagger(tmp_path / "old.pt"), sentences, 8) == found
    assert CliRunner().invoke(main, [str(tmp_path / "old.pt"), "--out", str(tmp_path / "new.pt")]).exit_code == 0
    assert predict_entities(CellTagger.load(tmp_path / "new.pt"), sentences, 8) == found


def test_export_refuses_a_crafted_pickle_and_writes_nothing(tmp_path):
    from tagger.cli.export import main

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"nas_tagger_format": 2, "tag_dictionary": Evil()}, tmp_path / "evil.pt")
    result = CliRunner().invoke(main, [str(tmp_path / "evil.pt"), "--out", str(tmp_path / "out.pt")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {tmp_path / 'evil.pt'}: refused: its pickle names ")
    assert "posix.system" in result.stderr or "os.system" in result.stderr  # the refused global is named
    assert not marker.exists() and not (tmp_path / "out.pt").exists()
    with pytest.raises(InputError, match="refused: its pickle names"):  # flair's entry point, same loader
        CellTagger.load(tmp_path / "evil.pt")
    assert not marker.exists()


def test_the_readme_python_api_tags_a_string_with_character_offsets(tiny_tagger):
    import tagger
    from flair.data import Sentence

    text = "Dorva visited Baposa on Monday with Kelo Vanor ."
    model = tagger.load_tagger(tiny_tagger[0])
    sentence = Sentence(text)
    model.predict(sentence)
    spans = sentence.get_spans()
    assert spans and all(
        text[s.start_position : s.end_position] == s.text and s.tag in {"PER", "LOC", "ORG", "MISC"} for s in spans
    )


def _flair_spans(model_file: Path, words: list[list[str]], toolkit_import: str) -> subprocess.CompletedProcess:
    """flair's own loaders in a fresh interpreter after `toolkit_import`: the spans each one's model predicts."""
    script = (
        f"{toolkit_import}\nimport json\nfrom flair.data import Sentence\nfrom flair.models import SequenceTagger\n"
        "from flair.nn import Classifier\nfound = []\n"
        "for load in (SequenceTagger.load, Classifier.load):\n"
        f"    model = load({str(model_file)!r})\n"
        f"    sentences = [Sentence(w) for w in {words!r}]\n"
        "    model.predict(sentences, mini_batch_size=8)\n"
        "    found.append([type(model).__name__, [[[s[0].idx - 1, s[-1].idx, s.tag] for s in x.get_spans('ner')]"
        " for x in sentences]])\n"
        "print(json.dumps(found))\n"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300)


def test_flairs_own_loaders_return_the_cell_tagger_after_one_import_and_tag_as_bin_tag(tiny_tagger, tmp_path):
    from tagger.cli.tag import main
    from tagger.tag_schemes import spans

    run, data = tiny_tagger
    words = [block.split() for block in (data / "raw.txt").read_text().split(".")[:12] if block.split()]
    (tmp_path / "in.txt").write_text("\n".join(" ".join(w) for w in words) + "\n")
    tagged = CliRunner().invoke(main, ["--model", str(run), "--tokenized", str(tmp_path / "in.txt")])
    assert tagged.exit_code == 0, tagged.stderr
    expected = [
        [list(s) for s in spans([row.split(" ")[1] for row in block.splitlines()])]
        for block in tagged.stdout.strip().split("\n\n")
    ]
    assert len(expected) == len(words) and any(expected)

    proc = _flair_spans(run / "best-model.pt", words, "import tagger")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [["CellTagger", expected], ["CellTagger", expected]]


def test_without_the_import_flairs_error_names_the_call_that_works(tiny_tagger):
    run, _ = tiny_tagger
    proc = _flair_spans(run / "best-model.pt", [["Kelo", "Vanor"]], "")
    assert proc.returncode != 0
    assert "Unknown RNN type: FrozenRNN, a searched cell of nas-tagger: run `import tagger`" in proc.stderr


def test_saved_taggers_say_what_rebuilding_them_needs(setup):
    import flair

    import nas

    state = torch.load(saved(setup, "darts_v2", "needs.pt")[0], weights_only=False)
    assert state["requires"] == {
        "flair": flair.__version__,
        "nas-tagger": nas.__version__,
        "cell": load("darts_v2").to_dict(),
        "load": state["requires"]["load"],
    }
    assert "import tagger," in state["requires"]["load"]
    lstm = torch.load(saved(setup, None, "needs-lstm.pt")[0], weights_only=False)
    assert lstm["requires"] == {"flair": flair.__version__}
