import torch, time, statistics
from nas.cells.cell import FrozenRNN
from nas.cells.genotype import load
import nas.fast.frozen_loop as fl
torch.set_num_threads(1)
for H, B in ((300, 64), (64, 64)):
    torch.manual_seed(0)
    rnn = FrozenRNN(load("darts_v2"), H, H, directions=1, dropout_x=0.75, dropout_h=0.25).train()
    x = torch.randn(35, B, H, requires_grad=True)
    native = (fl._native_forward_steps, fl._native_backward_steps)
    def py_f(plan, counts, h0, mh, weights, X, A, S, out):
        fl._forward_steps(plan, counts, h0[0:1], None if mh is None else mh[0:1], [[w[0:1] for w in wave] for wave in weights], None if X is None else X[0:1], A[0:1], S[0:1], out[0:1])
    def py_b(plan, counts, grad_out, mh, weights, A, S, G):
        return fl._backward_steps(plan, counts, grad_out[0:1], None if mh is None else mh[0:1], [[w[0:1] for w in wave] for wave in weights], A[0:1], S[0:1], G[0:1])
    res = {"c++": [], "python": []}
    for rep in range(12):
        for side in res:
            fl._native_forward_steps, fl._native_backward_steps = native if side == "c++" else (py_f, py_b)
            t = time.perf_counter(); out, h = rnn(x); out.sum().backward(); res[side].append(time.perf_counter() - t)
    fl._native_forward_steps, fl._native_backward_steps = native
    m = {k: statistics.median(v[2:]) for k, v in res.items()}
    print(f"LM layer H={H} B={B} T=35 fwd+bwd: c++ {m['c++']*1e3:.1f} ms, python steps {m['python']*1e3:.1f} ms, ratio {m['python']/m['c++']:.2f}")
