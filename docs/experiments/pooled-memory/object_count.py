"""What the pooled-Flair tagger keeps per token after its first epoch on the full CoNLL-2000 training set:
the memory it adds, and how many of the pooled vectors are distinct tensors and distinct values.
Run from anywhere with the venv active: python object_count.py DATA (a CoNLL-2000 folder)."""
import gc, os, random, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch
torch.set_num_threads(1)
from tagger.embeddings import build_embeddings
from tagger.corpora import load_corpus, to_sentences
from tagger.charlm_states import reuse_states
from flair.training_utils import store_embeddings

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**30

corpus = load_corpus("conll2000", sys.argv[1])
train = to_sentences(corpus.train, corpus.tag_type)
print("tokens", sum(len(s) for s in train), "rss", round(rss(), 3))
emb = build_embeddings("pooled-flair:wt2-forward:wt2-backward")
reuse_states(emb, train, None)
print("after tables rss", round(rss(), 3))
emb.train()
random.seed(1); order = list(range(len(train))); random.shuffle(order)
gc.collect(); base = rss()
t = time.time()
for i in range(0, len(order), 32):
    batch = [train[j] for j in order[i:i + 32]]
    emb.embed(batch)
    store_embeddings(batch, "cpu")
gc.collect()
print("epoch1 embed %.1fs rss +%.3f GB" % (time.time() - t, rss() - base))
for pooled in [m for m in emb.modules() if type(m).__name__ == "PooledFlairEmbeddings"]:
    ids = {}; eq = 0; n = 0
    views = 0
    byval = {}
    for s in train:
        for tok in s.tokens:
            v = tok._embeddings[pooled.name]
            n += 1
            ids[id(v)] = v
            if v._base is not None: views += 1
    distinct = len(ids)
    # how many distinct values
    vals = {}
    for v in ids.values():
        vals.setdefault(v.numpy().tobytes(), 0)
    print(pooled.name[-30:], "tokens", n, "distinct tensors", distinct, "views", views, "distinct values", len(vals))
