import torch, time, statistics
from nas.cells.cell import FrozenRNN
from nas.cells.genotype import load
torch.manual_seed(0)
rnn = FrozenRNN(load("darts_v2"), 512, 512, directions=2).train()
x = torch.randn(30, 32, 512, requires_grad=True); lengths = torch.full((32,), 30)
torch.set_num_threads(2)
def once():
    out, h = rnn(x, None, lengths); out.sum().backward()
once()
ts = []
for _ in range(9):
    t = time.perf_counter(); once(); ts.append(time.perf_counter() - t)
print("2 threads fwd+bwd", round(statistics.median(ts), 4))
