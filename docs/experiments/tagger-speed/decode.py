"""Issue 35, 2026-11-26: the Viterbi decoding alone, flair's ViterbiDecoder on the pair scores against
tagger.crf.PairDecoder on the emissions (the same results, tests/test_crf.py), 64 sentences of up to 30
tokens, interleaved in one process, medians of 9. From the repository root:
taskset -c 0 .venv/bin/python docs/experiments/tagger-speed/decode.py
"""
import sys, time, statistics, torch
sys.path.insert(0, "tests")
torch.set_num_threads(1)
from test_crf import chunk_tags, batch, pair_scores, dictionary
from flair.models.sequence_tagger_utils.viterbi import ViterbiDecoder
from tagger.crf import PairDecoder
for d, name in ((dictionary([f"{p}-{k}" for k in ("PER", "LOC", "ORG", "MISC") for p in "BIES"] + ["O"]), "NER 19 tags"), (chunk_tags(), "chunking 43 tags")):
    emissions, transitions, lengths, _ = batch(d, 64, 30, seed=5)
    ours, theirs = PairDecoder(d), ViterbiDecoder(d)
    r = {"flair": [], "ours": []}
    for _ in range(9):
        t = time.perf_counter(); theirs.decode((pair_scores(emissions, transitions), lengths, transitions), False, None); r["flair"].append(time.perf_counter() - t)
        t = time.perf_counter(); ours.decode((emissions, lengths, transitions), False, None); r["ours"].append(time.perf_counter() - t)
    m = {k: round(statistics.median(v) * 1e3, 2) for k, v in r.items()}
    print(name, "64 sentences, up to 30 tokens:", m, "ms", round(m["flair"] / m["ours"], 2), "x")
