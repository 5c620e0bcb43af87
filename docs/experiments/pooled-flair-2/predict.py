"""Seconds to tag the slice's 400 test sentences with a pooled-Flair tagger (DARTS_V2, hidden 64, untrained:
prediction does the same work), as bin/tag does it: median of 7 after 2 warm-up passes, 1 thread.
argv[1]: a CoNLL-2000 folder. Run with PYTHONPATH at the checkout to time."""
import statistics
import sys
import time

import torch

torch.set_num_threads(1)
from nas.cells.genotype import load  # noqa: E402
from tagger.charlm_states import reuse_states  # noqa: E402
from tagger.config import TaggerConfig  # noqa: E402
from tagger.corpora import load_corpus, to_sentences  # noqa: E402
from tagger.embeddings import build_embeddings  # noqa: E402
from tagger.pooled_memory import bound_pooled_memory  # noqa: E402
from tagger.prediction import predict_entities  # noqa: E402
from tagger.train import build_model  # noqa: E402

spec = "glove:glove-6b-50d,pooled-flair:wt2-forward:wt2-backward"
corpus = load_corpus("conll2000", sys.argv[1])
embeddings = build_embeddings(spec)
test = to_sentences(corpus.test, corpus.tag_type)
reuse_states(embeddings, test)
torch.manual_seed(1)
model = build_model(TaggerConfig(hidden_size=64, embeddings=spec), corpus, embeddings, load("darts_v2")).eval()
bound_pooled_memory(model)
times = []
with torch.inference_mode():
    for i in range(9):
        start = time.perf_counter()
        predict_entities(model, test, 64)
        times.append(time.perf_counter() - start)
print(f"predict {len(test)} sentences: median {statistics.median(times[2:]):.3f} s, "
      f"{len(test) / statistics.median(times[2:]):.0f} sentences/s ({', '.join(f'{t:.3f}' for t in times[2:])})")
