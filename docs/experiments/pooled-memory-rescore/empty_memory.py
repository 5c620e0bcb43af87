"""Each saved model of a bin/transfer run directory scored on its test split from an empty pooled-Flair
memory, the state flair's in-memory model had when the earlier transfer study scored it (flair's
embedding storage leaves the memory empty after the first epoch), beside its reported score (the
saved file's, its memory pooled over train and dev). Isolates what the saved memory changes.

    python empty_memory.py RUN_DIR CORPUS_FORMAT DATA_DIR | grep '^{' > out.jsonl
"""
import json
import sys
from pathlib import Path

import torch

from tagger import evaluation
from tagger.corpora import load_corpus, to_sentences
from tagger.model import load_for_prediction
from tagger.pooled_memory import pooled_embeddings

run_dir, corpus_format, data = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
for metrics_file in sorted(run_dir.glob("*/*/seed-*/metrics.json")):
    run = metrics_file.parent
    config = json.loads((run / "config.json").read_text())
    corpus = load_corpus(corpus_format, data, seed=config.get("seed", 1))
    reported = json.loads(metrics_file.read_text())["test"]["f1"]
    model = load_for_prediction(run)
    for embedding in pooled_embeddings(model):
        embedding.word_embeddings, embedding.word_count = {}, {}
    report, _ = evaluation.evaluate_saved(model, to_sentences(corpus.test, corpus.tag_type), corpus.test.tags,
                                          config.get("eval_batch_size", 64))
    print(json.dumps({"run": str(run.relative_to(run_dir)), "reported": reported, "empty": report["f1"]}), flush=True)
