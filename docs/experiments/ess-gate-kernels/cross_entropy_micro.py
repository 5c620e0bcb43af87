"""The language model's loss over 2,240 x 10,000 logits, forward and backward: torch's F.cross_entropy against
the kernels of nas.fast.cross_entropy, alternating, medians of 7. One thread; run pinned:
taskset -c 0 python cross_entropy_micro.py"""
import sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch
import torch.nn.functional as F
from nas.common.memory import keep_freed_memory
keep_freed_memory()
torch.set_num_threads(1)
from nas.fast import _fused_kernels as K
torch.manual_seed(0)
R, V = 2240, 10000
logits = torch.randn(R, V) * 3
targets = torch.randint(V, (R,))
def torch_ce():
    l = logits.requires_grad_(True); loss = F.cross_entropy(l, targets); loss.backward(); l.grad = None
def ours():
    lse, loss = K.cross_entropy_forward(logits, targets); K.cross_entropy_backward(logits, targets, lse, 1.0 / R)
def ours_fwd():
    K.cross_entropy_forward(logits, targets)
def torch_fwd():
    F.cross_entropy(logits.detach(), targets)
for label, f in [("torch", torch_ce), ("ours", ours), ("torch fwd", torch_fwd), ("ours fwd", ours_fwd)] * 2:
    for _ in range(2): f()
    ts = []
    for _ in range(7):
        s = time.perf_counter(); f(); ts.append(time.perf_counter() - s)
    print(label, "ms", round(sorted(ts)[3] * 1e3, 2))
