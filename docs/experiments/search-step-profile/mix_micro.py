import sys, time
ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]; sys.path.insert(0, str(ROOT))
import torch
torch.set_num_threads(1)
from nas.fast import kernels as K
kern = K.compiled()
k, B, H = 8, 64, 300
ch = torch.randn(k, B, 2 * H); states = torch.randn(k, B, H); act = torch.empty(k, B, 2 * H); out = torch.empty(B, H)
w = torch.softmax(torch.randn(k, 4), -1)
for _ in range(50): kern.mixed_node_forward(ch, states, w, act, out)
n = 2000
t = time.perf_counter()
for _ in range(n): kern.mixed_node_forward(ch, states, w, act, out)
dt = (time.perf_counter() - t) / n
print(f"in cache: {dt*1e6:.1f} us per call, {dt / (k*B*H) * 1e9:.2f} ns per edge-element")
# in place (act is ch)
t = time.perf_counter()
for _ in range(n): kern.mixed_node_forward(ch, states, w, ch, out)
dt = (time.perf_counter() - t) / n
print(f"in place: {dt*1e6:.1f} us per call, {dt / (k*B*H) * 1e9:.2f} ns per edge-element")
g = torch.randn(B, H); gs = torch.zeros(k, B, H); gw = torch.zeros(k, 5, dtype=torch.float64); gg = torch.empty(k, B, 2*H)
t = time.perf_counter()
for _ in range(n): kern.mixed_node_backward(g, act, states, w, gg, gs, gw)
dt = (time.perf_counter() - t) / n
print(f"backward in cache: {dt*1e6:.1f} us per call, {dt / (k*B*H) * 1e9:.2f} ns per edge-element")
