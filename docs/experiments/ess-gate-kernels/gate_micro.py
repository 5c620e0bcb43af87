"""One ESS search gate (m = 3, N = 3, 64 wide) forward and backward: step by step as g′ runs (64 rows) and
over a whole sequence as f′ runs (35 × 64 rows), its kernels (fused) against its autograd path. One thread;
run pinned: taskset -c 0 python gate_micro.py"""
import sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch
torch.set_num_threads(1)
from nas.cells.gates import SearchGate
from nas.methods.darts import Darts
torch.manual_seed(0)
for R, T in ((64, 1), (64, 35)):
    g = SearchGate(3, 3, 64, 64, Darts.rule)
    hist = torch.randn(3, T, R, 64, requires_grad=True) if T > 1 else torch.randn(3, R, 64, requires_grad=True)
    def run(fused, stepwise):
        g.fused = fused
        if stepwise:
            f = g.stepwise()
            out = f(hist)
        else:
            out = g(hist)
        out.sum().backward()
    for stepwise in ((True,) if T == 1 else (False,)):
        res = {}
        for rep in range(3):
            for fused in (False, True):
                for _ in range(20): run(fused, stepwise)
                t = time.perf_counter()
                for _ in range(200): run(fused, stepwise)
                res.setdefault(fused, []).append((time.perf_counter() - t) / 200 * 1e3)
        print("R", R, "T", T, "stepwise", stepwise, {k: [round(x, 3) for x in v] for k, v in res.items()}, "ms per fwd+bwd")
