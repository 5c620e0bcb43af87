"""torch.profiler of 20 training steps (forward_loss, backward, SGD) of the slice tagger: argv[1] embeddings, argv[2] a CoNLL-2000 folder (the slice: the first 2,000 training and 400 test sentences)."""
import sys, time
import torch
from torch.profiler import profile, ProfilerActivity
torch.set_num_threads(1)
from nas.cells.genotype import load
from nas.common.memory import keep_freed_memory
from tagger.config import TaggerConfig
from tagger.corpora import load_corpus
from tagger.embeddings import build_embeddings
from tagger.train import build_model
from tagger.charlm_states import reuse_states
keep_freed_memory()
torch.manual_seed(1)
spec = sys.argv[1]
corpus = load_corpus("conll2000", sys.argv[2])
from tagger.corpora import to_sentences
config = TaggerConfig(hidden_size=64, max_epochs=1, embeddings=spec)
emb = build_embeddings(spec)
sents = to_sentences(corpus.train, corpus.tag_type)
reuse_states(emb, sents)
model = build_model(config, corpus, emb, load('darts_v2'))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [sents[i:i + 32] for i in range(0, 32 * 40, 32)]
def step(b):
    opt.zero_grad()
    loss = model.forward_loss(b)
    l = loss[0] if isinstance(loss, tuple) else loss
    l.backward(); opt.step()
for b in batches[:20]: step(b)   # warm (embeds every token once, as flair's first epoch)
t = time.perf_counter()
for b in batches[20:40]: step(b)
print("20 steps", time.perf_counter() - t)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
    for b in batches[20:40]: step(b)
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=55))
print(p.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=40, max_shapes_column_width=90))
