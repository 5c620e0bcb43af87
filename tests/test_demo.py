import json
import os
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from tagger.cli import demo

REPO = Path(__file__).resolve().parent.parent


def test_demo_runs_every_step_end_to_end_at_the_smallest_size(tmp_path, monkeypatch):
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bin" / "demo"), "--quick", "--run-dir", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for step in ("bin/train-wordvec", "bin/search-lm", "bin/train-lm", "bin/train-tagger", "bin/tag"):
        assert f"$ {step} " in proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["genotype"]) == 4 and summary["retrain_valid_ppl"] > 1
    assert 0 <= summary["tagger_test_f1"] <= 1
    assert summary["tagger_test_f1"] > 0  # --quick still learns to tag: not the all-O tagger's 0
    assert re.search(r"^  .*\[(PER|LOC|ORG|MISC) ", proc.stdout, re.M), proc.stdout  # a tagged entity shown
    assert f"(output in {out / 'train-tagger.log'})" in proc.stderr
    assert "epoch 1" in (out / "train-tagger.log").read_text()  # the log keeps the full output
    raw = (out / "data" / "raw.txt").read_text().split()
    tagged = (out / "tagged.txt").read_text()
    assert raw[0] in tagged and "tagger test F1" in proc.stdout
    # the refusal is the command's logic, not the process's: in-process (the demo sets OMP_NUM_THREADS, put back)
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    again = CliRunner().invoke(demo.main, ["--quick", "--run-dir", str(out)])
    assert again.exit_code == 2 and "holds a finished demo already" in again.stderr
