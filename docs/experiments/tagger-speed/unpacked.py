"""Issue 35 item 4 extended: unpacked products (decoder, input projections, weight gradients) on oneDNN
only where `prefers_onednn(..., packed=False)` measures it faster ("measured"), against always on
oneDNN as before ("always"), in one process, alternating, medians: the DARTS search step (first
order, batch 64, bptt 35, 8 nodes, 10k words) at H = 64 and 300, and a tagger epoch (DARTS_V2,
hidden 256, 1,000 synthetic sentences, 100-d vectors) with its prediction of 200 sentences."""
import random
import statistics
import sys
import tempfile
import time
from argparse import Namespace
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import torch  # noqa: E402

import search_step  # noqa: E402
import tagger_epoch  # noqa: E402
from harness import gemm_peaks, train_tagger_epoch  # noqa: E402
from nas.fast import gemm  # noqa: E402
from nas.lm.corpus import Corpus  # noqa: E402

torch.set_num_threads(1)
measured = gemm.prefers_onednn
CHOICES = {"measured": measured, "always": lambda rows, K, N, packed=True: True if not packed else measured(rows, K, N)}


def compare(name: str, fn, repeats: int) -> None:
    fn()
    times = {k: [] for k in CHOICES}
    for _ in range(repeats):
        for k, choice in CHOICES.items():
            gemm.prefers_onednn = choice
            start = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - start)
    gemm.prefers_onednn = measured
    m = {k: statistics.median(v) for k, v in times.items()}
    print(f"{name}: measured {m['measured']:.4f} s, always oneDNN {m['always']:.4f} s, "
          f"always / measured {m['always'] / m['measured']:.3f}", flush=True)


print("gemm peaks", gemm_peaks(), flush=True)
torch.manual_seed(0)
tokens = 64 * (8 * 35 + 2)
corpus = Corpus([f"w{i}" for i in range(10000)], *(torch.randint(10000, (tokens,)) for _ in range(3)),
                {s: Path("synthetic") for s in ("train", "valid", "test")})
for H in (64, 300):
    args = Namespace(method="darts", nhid=H, nodes=8, batch_size=64, bptt=35, device="cpu")
    searcher = search_step.make_searcher(search_step.config_of(args, 1), corpus, Path(tempfile.mkdtemp()), False)
    compare(f"search step H={H}", search_step.step_fn(searcher, 35, "fp32"), 7)

from nas.cells.genotype import load  # noqa: E402
from tagger.config import TaggerConfig  # noqa: E402
from tagger.corpora import load_corpus, to_sentences  # noqa: E402
from tagger.embeddings import build_embeddings  # noqa: E402
from tagger.synthetic import generate  # noqa: E402
from tagger.train import build_model  # noqa: E402

tmp = Path(tempfile.mkdtemp())
data = generate(tmp / "data", seed=1, train=1000, dev=10, test=200, lm_lines=10, raw_paragraphs=1)
tagged = load_corpus("conll03", data / "conll03")
vectors = tmp / "vectors.txt"
tagger_epoch.write_vectors(vectors, {t for split in (tagged.train, tagged.test) for s in split.tokens for t in s}, 100, 1)
embeddings = build_embeddings(f"glove:{vectors}")
train, test = to_sentences(tagged.train, tagged.tag_type), to_sentences(tagged.test, tagged.tag_type)
torch.manual_seed(1)
model = build_model(replace(TaggerConfig(), hidden_size=256), tagged, embeddings, load("darts_v2"))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
compare("tagger epoch", lambda: train_tagger_epoch(model, train, 32, optimizer, random.Random(0)), 4)
compare("tagger prediction", lambda: tagger_epoch.predict(model, test, 64), 7)
print("gemm peaks", gemm_peaks(), flush=True)
