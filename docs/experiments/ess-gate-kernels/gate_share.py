"""The ESS joint search step (H = 64, first order) with g′, f′ or both replaced by constants (their parameters then get no gradient): what each gate costs a step. One thread; run pinned: taskset -c 0 python gate_share.py"""
import sys, tempfile, time
from pathlib import Path
ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]; sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
import torch
torch.set_num_threads(1)
from search_step import make_searcher, step_fn, config_of
from nas.lm.corpus import Corpus
import argparse
args = argparse.Namespace(method="ess", nhid=64, nodes=8, batch_size=64, bptt=35, device="cpu", vocab=10000)
torch.manual_seed(0)
tokens = 64 * (8 * 35 + 2)
vocab = [f"w{i}" for i in range(10000)]
corpus = Corpus(vocab, torch.randint(10000, (tokens,)), torch.randint(10000, (tokens,)), torch.randint(10000, (tokens,)),
                {s: Path("synthetic") for s in ("train", "valid", "test")})
with tempfile.TemporaryDirectory() as tmp:
    s = make_searcher(config_of(args, 1), corpus, Path(tmp) / "f", False)
    import nas.cells.gates as G
    model = s.model if hasattr(s, "model") else None
    def timeit(label):
        step = step_fn(s, 35, "fp32")
        for _ in range(3): step()
        ts = []
        for _ in range(7):
            t = time.perf_counter(); step(); ts.append(time.perf_counter() - t)
        print(label, "median %.4f" % sorted(ts)[3])
    timeit("full")
    orig = G.SearchGate.stepwise
    def const_g(self):
        def gate(history):
            return history.new_ones(history.size(1), self.d_gate)
        return gate
    G.SearchGate.stepwise = const_g
    timeit("g const")
    origf = G.SearchGate.forward
    G.SearchGate.forward = lambda self, history: history.new_ones(*history.shape[1:-1], self.d_gate)
    timeit("g,f const")
    G.SearchGate.stepwise = orig
    timeit("f const")
    G.SearchGate.forward = origf
    timeit("full")
