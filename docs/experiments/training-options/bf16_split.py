"""Where bf16's time goes in the tagger: 60 training batches (batch 32, the same sentences) of the
DARTS_V2 tagger, hidden 128, GloVe 6B 50d, CoNLL-2000, one thread, forward + backward + SGD step,
under fp32 with the fused frozen loop (the default), fp32 op by op (the cell's autograd path, what
autocast makes it run), and bf16 autocast (tagger.train.training_precision).

    taskset -c 1 python docs/experiments/training-options/bf16_split.py /work/shared/data/conll2000
"""
import sys
import time

import torch

torch.set_num_threads(1)
from nas.cells.genotype import load  # noqa: E402
from tagger.config import TaggerConfig  # noqa: E402
from tagger.corpora import load_corpus, to_sentences  # noqa: E402
from tagger.embeddings import build_embeddings  # noqa: E402
from tagger.train import build_model, training_precision  # noqa: E402

corpus = load_corpus("conll2000", sys.argv[1])
config = TaggerConfig(corpus="conll2000", hidden_size=128)
embeddings = build_embeddings("glove:glove-6b-50d")
sentences = to_sentences(corpus.train, corpus.tag_type)[:60 * 32]
batches = [sentences[k:k + 32] for k in range(0, len(sentences), 32)]
for name, fused, precision in [("fp32, fused loop", True, "fp32"), ("fp32, op by op", False, "fp32"),
                               ("bf16 autocast", True, "bf16")]:
    torch.manual_seed(1)
    model = build_model(config, corpus, embeddings, load("darts_v2"))
    for module in model.modules():
        if hasattr(module, "fused"):
            module.fused = fused
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with training_precision(model, torch.device("cpu"), precision):
        for batch in batches[:5]:  # warm-up
            model.forward_loss(batch)[0].backward()
        start = time.perf_counter()
        for batch in batches:
            optimizer.zero_grad()
            loss = model.forward_loss(batch)[0]
            loss.backward()
            optimizer.step()
        seconds = time.perf_counter() - start
    print(f"{name:18s} {seconds:6.2f} s for {len(batches)} batches ({1000 * seconds / len(batches):.0f} ms a batch)", flush=True)
