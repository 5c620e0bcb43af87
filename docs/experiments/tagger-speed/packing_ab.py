"""Issue 35, 2026-11-25: a tagger epoch (bench/tagger_epoch.py's setup: DARTS_V2 at hidden 256, 100-d
random vectors, 1,000 synthetic sentences, batch 32, SGD) with the frozen loop's weights packed for
oneDNN three ways, swapped in one process, alternating, medians of 4:
  old:  packed for every step where oneDNN leads at the batch's first step's rows (483ae02's rule);
  new:  nas.fast.gemm.pack_for_steps, packed only from the rows where oneDNN leads and where it pays;
  mkl:  never packed, every per-step product on torch.mm.
Run from the repository root: taskset -c 0 .venv/bin/python docs/experiments/tagger-speed/packing_ab.py
"""
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, "bench")
import torch  # noqa: E402

import nas.fast.frozen_loop as frozen_loop  # noqa: E402
import nas.fast.gemm as gemm  # noqa: E402
import tagger_epoch  # noqa: E402
from harness import gemm_peaks, train_tagger_epoch  # noqa: E402
from nas.cells.genotype import load  # noqa: E402
from tagger.config import TaggerConfig  # noqa: E402
from tagger.corpora import load_corpus, to_sentences  # noqa: E402
from tagger.embeddings import build_embeddings  # noqa: E402
from tagger.synthetic import generate  # noqa: E402
from tagger.train import build_model  # noqa: E402

torch.set_num_threads(1)
print("start", open("/proc/loadavg").read().strip(), "peaks", gemm_peaks())
tmp = Path(tempfile.mkdtemp())
data = generate(tmp / "data", seed=1, train=1000, dev=10, test=10, lm_lines=10, raw_paragraphs=1)
corpus = load_corpus("conll03", data / "conll03")
tagger_epoch.write_vectors(tmp / "vectors.txt", {t for s in corpus.train.tokens for t in s}, 100, 1)
embeddings = build_embeddings(f"glove:{tmp / 'vectors.txt'}")
train = to_sentences(corpus.train, corpus.tag_type)
torch.manual_seed(1)
model = build_model(TaggerConfig(hidden_size=256), corpus, embeddings, load("darts_v2"))
optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
train_tagger_epoch(model, train[:64], 32, optimiser, random.Random(1))  # warm-up, shapes measured


def old(weight, counts):
    if gemm.prefers_onednn(counts[0], weight.size(1), weight.size(0)):
        return gemm.LoopWeight(weight, torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), None), 1)
    return gemm.LoopWeight(weight, None, gemm.NEVER)


ways = {"old": old, "new": gemm.pack_for_steps, "mkl": lambda weight, counts: gemm.LoopWeight(weight, None, gemm.NEVER)}
seconds = {way: [] for way in ways}
for repeat in range(4):
    for way, rule in ways.items():
        frozen_loop.pack_for_steps = rule
        start = time.perf_counter()
        train_tagger_epoch(model, train, 32, optimiser, random.Random(repeat))
        seconds[way].append(time.perf_counter() - start)
print({way: [round(s, 3) for s in times] for way, times in seconds.items()})
print("median / old:", {way: round(statistics.median(times) / statistics.median(seconds["old"]), 3)
                        for way, times in seconds.items()})
print("end", open("/proc/loadavg").read().strip(), "peaks", gemm_peaks())
