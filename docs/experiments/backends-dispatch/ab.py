"""A/B of the CPU fast paths before and after the dispatch moved to nas.fast.backends: `python ab.py ROOT` times the
checkout at ROOT (before: one without nas/fast/backends.py, whose cells ran their fast paths by default; after: the
cells on cpu-fused) on one thread, forward+backward of the search cell and of the frozen BiRNN, and the BiRNN's
prediction; one JSON line of medians of 7, in ms. Run alternately, pinned: see README.txt."""
import sys, time, json, statistics
root = sys.argv[1]
sys.path.insert(0, root)
import torch
torch.set_num_threads(1)
from nas.cells.search_cell import SearchRNN
from nas.cells.cell import FrozenRNN
from nas.cells.genotype import load
from nas.methods.darts import Darts
try:
    from nas.fast.backends import attach, CpuFused
except ImportError:
    attach = None
import nas
assert nas.__file__.startswith(root), nas.__file__
torch.manual_seed(0)
cell = SearchRNN(300, 300, 8, Darts.rule, dropout_x=0.25, dropout_h=0.25)
frozen = FrozenRNN(load("darts_v2"), 1024, 256, directions=2)
if attach:
    attach(cell, CpuFused()); attach(frozen, CpuFused())
x = torch.randn(35, 64, 300)
g = torch.Generator().manual_seed(0)
lengths = torch.randint(1, 34, (32,), generator=g).clamp(min=1)
xf = torch.randn(int(lengths.max()), 32, 1024)
def search():
    out, _ = cell(x); out.sum().backward()
def bi():
    out, _ = frozen(xf, lengths=lengths); out.sum().backward()
def bi_pred():
    with torch.inference_mode():
        frozen.eval(); frozen(xf, lengths=lengths); frozen.train()
res = {}
for name, f in [("search", search), ("birnn", bi), ("birnn_predict", bi_pred)]:
    f(); ts = []
    for _ in range(7):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    res[name] = round(1000 * statistics.median(ts), 1)
print(json.dumps({"root": root, **res}))
