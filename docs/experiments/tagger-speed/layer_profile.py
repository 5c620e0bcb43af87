"""Issue 35, 2026-11-25: where the frozen layer's time goes at a tagger's sizes (DARTS_V2, hidden 256,
input 100, both directions, 32 sentences of 5-29 words), forward and backward, torch profiler over
5 passes: self time per op and calls per step and direction. Run from the repository root:
taskset -c 0 .venv/bin/python docs/experiments/tagger-speed/layer_profile.py
"""
import torch, time, statistics
torch.set_num_threads(1)
from nas.cells.genotype import load
from nas.cells.cell import FrozenRNN
from torch.profiler import profile, ProfilerActivity
torch.manual_seed(0)
H, NINP = 256, 100
g = torch.Generator().manual_seed(1)
lengths = torch.randint(5, 30, (32,), generator=g)
T = int(lengths.max())
x = torch.randn(T, 32, NINP)
layer = FrozenRNN(load("darts_v2"), NINP, H, directions=2).train()
def fwd():
    return layer(x, lengths=lengths)[0]
def run():
    layer.zero_grad(set_to_none=True)
    out = fwd(); out.sum().backward()
for _ in range(3): run()
ts = []
for _ in range(15):
    t = time.perf_counter(); run(); ts.append(time.perf_counter() - t)
steps = T * 2
print("T", T, "rows", int(lengths.sum()), "fwd+bwd median ms", round(statistics.median(ts) * 1e3, 2))
with profile(activities=[ProfilerActivity.CPU]) as p:
    for _ in range(5): run()
rows = sorted(p.key_averages(), key=lambda e: -e.self_cpu_time_total)
tot = sum(e.self_cpu_time_total for e in rows)
for e in rows[:25]:
    print(f"{e.key:40s} {e.self_cpu_time_total/5/1e3:8.2f} ms  {100*e.self_cpu_time_total/tot:5.1f}%  calls/step-dir {e.count/5/steps:6.1f}")
