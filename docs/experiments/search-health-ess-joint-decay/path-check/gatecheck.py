"""Fused (step per call) against autograd for an ESS-gated search cell at issue 30's sizes, float32, each GEMM backend."""
import sys, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
torch.set_num_threads(1)
from nas.fast import gemm
from nas.cells.gates import InterGates
from nas.methods.darts import Darts
from nas.cells.search_cell import SearchRNN
backend = sys.argv[1]
if backend != "measured":
    gemm.prefers_onednn = lambda rows, K, N, packed=True: backend == "onednn"
    gemm.packing_pays = lambda counts, K, N: backend == "onednn"
torch.manual_seed(0)
rule = Darts.rule
H, B, T = 64, 64, 35
cell = SearchRNN(H, H, 8, rule, dropout_x=0.25, dropout_h=0.75, inter=InterGates.search(H, H, rule, 3, 3))
with torch.no_grad():
    for name, p in cell.named_parameters():
        if "alpha" in name: p.normal_(0, 1e-3)
x = torch.randn(T, B, H, requires_grad=True)
hidden = cell.init_hidden(B) if hasattr(cell, "init_hidden") else None
def run():
    torch.manual_seed(1)
    out, hid = cell(x, hidden)
    loss = (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum()
    return [out] + list(torch.autograd.grad(loss, [x, *cell.parameters()]))
names = ["out", "x"] + [n for n, _ in cell.named_parameters()]
assert cell.fusable(x)
a = run()
cell.fused = False
b = run()
worst = []
for n, u, v in zip(names, a, b):
    err = float((u - v).detach().abs().max() / v.detach().abs().max().clamp_min(1e-30))
    worst.append((err, n))
for err, n in sorted(worst, reverse=True)[:8]:
    print(backend, f"{err:.2e}", n)
