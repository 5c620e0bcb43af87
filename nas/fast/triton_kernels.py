"""The Triton kernels of `nas.fast.triton_loop` (imported by it on first use: Triton is optional).

`triton.jit` reads TRITON_INTERPRET when it decorates, so this module is imported once per mode. Loops
whose bounds are read from the plan's tables or the step count are `while` loops, and the hidden size
is a compile-time constant: the interpreter takes neither a loaded scalar nor an argument as a `range`
bound. Zeros are `tl.full`, not `tl.zeros`: Triton's own jitted helpers are decorated when Triton is
imported, and the interpreter cannot run them when that was before TRITON_INTERPRET was set.

Each kernel is a few phases, each a `triton.jit` helper that Triton inlines into it (one program, as
before): so a phase reads on its own, and the kernels read as the loop over steps and waves. The file is
left out of `ruff format` (pyproject.toml): the kernels' argument lists are written grouped, as the launch
passes them (pointers, plan tables, sizes, compile-time constants), not one a line.
"""

import triton
import triton.language as tl

INTERPRETED = bool(triton.knobs.runtime.interpret)  # the mode the kernels below were decorated in


@triton.jit
def sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def activate(x, code):
    """f(x) for op codes 0 identity, 1 tanh, 2 relu, 3 sigmoid (`nas.fast.kernels.OP_CODES`)."""
    tanh = 2.0 * sigmoid(2.0 * x) - 1.0
    return tl.where(code == 1, tanh, tl.where(code == 2, tl.maximum(x, 0.0), tl.where(code == 3, sigmoid(x), x)))


@triton.jit
def derivative(a, code):
    """f'(h) through a = f(h)."""
    one = tl.full(a.shape, 1.0, a.dtype)
    return tl.where(
        code == 1,
        one - a * a,
        tl.where(code == 2, tl.where(a > 0, one, 0.0 * one), tl.where(code == 3, a - a * a, one)),
    )


@triton.jit
def copy_rows(dst, dst_row, src, src_row, bm, H: tl.constexpr, BLOCK_H: tl.constexpr):
    """dst[dst_row] = src[src_row] for the sequences under `bm`, rows of H values."""
    for c in range(0, H, BLOCK_H):
        cols = c + tl.arange(0, BLOCK_H)
        m = bm[:, None] & (cols < H)[None, :]
        v = tl.load(src + src_row[:, None] * H + cols[None, :], mask=m)
        tl.store(dst + dst_row[:, None] * H + cols[None, :], v, mask=m)


@triton.jit
def fill_rows(dst, row, bm, H: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr):
    """dst[row] = 0 for the sequences under `bm`."""
    zeros = tl.full((BLOCK_B, BLOCK_H), 0.0, dst.dtype.element_ty)
    for c in range(0, H, BLOCK_H):
        cols = c + tl.arange(0, BLOCK_H)
        tl.store(dst + row[:, None] * H + cols[None, :], zeros, mask=bm[:, None] & (cols < H)[None, :])


# ---- forward ---------------------------------------------------------------------------------------


@triton.jit
def masked_input(X_d, S_d, mh_d, slot, pred, r, b, bm, R, I,
                 H: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_H: tl.constexpr):
    """A group's GEMM input X = prev ⊙ m_h, kept for the backward's weight gradients."""
    for c in range(0, H, BLOCK_H):
        cols = c + tl.arange(0, BLOCK_H)
        m = bm[:, None] & (cols < H)[None, :]
        v = tl.load(S_d + pred * R * H + r[:, None] * H + cols[None, :], mask=m)
        if HAS_MASK:
            v = v * tl.load(mh_d + b[:, None] * H + cols[None, :], mask=m)
        tl.store(X_d + r[:, None] * (I * H) + slot * H + cols[None, :], v, mask=m)
    tl.debug_barrier()


@triton.jit
def edge_product(A_d, W_d, src, src_row, e, code, r, bm, EW,
                 H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Edge e's [c | h] = src·W_e a tile of columns at a time (`tl.dot` in IEEE float32, as torch.mm; wave
    0's edge adds to the input projection A already holds), activated into A as [σ(c) | f(h)]."""
    H2: tl.constexpr = 2 * H
    for n in range(0, H2, BLOCK_N):
        cols = n + tl.arange(0, BLOCK_N)
        m = bm[:, None] & (cols < H2)[None, :]
        acc = tl.load(A_d + r[:, None] * EW + e * H2 + cols[None, :], mask=m & (e == 0), other=0.0)
        for k in range(0, H, BLOCK_K):
            ks = k + tl.arange(0, BLOCK_K)
            x = tl.load(src + r[:, None] * src_row + ks[None, :], mask=bm[:, None] & (ks < H)[None, :], other=0.0)
            wt = tl.load(W_d + ks[:, None] * EW + e * H2 + cols[None, :],
                         mask=(ks < H)[:, None] & (cols < H2)[None, :], other=0.0)
            acc += tl.dot(x, wt, input_precision="ieee")
        act = tl.where((cols < H)[None, :], sigmoid(acc), activate(acc, code))
        tl.store(A_d + r[:, None] * EW + e * H2 + cols[None, :], act, mask=m)


@triton.jit
def highway(A_d, S_d, e, node, pred, r, bm, R, EW, H: tl.constexpr, MULTI: tl.constexpr, BLOCK_H: tl.constexpr):
    """Edge e's highway into its node's state, s = p + σ(c)(f(h) − p); several edges into one node add up
    (S starts at zero)."""
    for c in range(0, H, BLOCK_H):
        cols = c + tl.arange(0, BLOCK_H)
        m = bm[:, None] & (cols < H)[None, :]
        at = A_d + r[:, None] * EW + e * 2 * H + cols[None, :]
        sig = tl.load(at, mask=m)
        a = tl.load(at + H, mask=m)
        p = tl.load(S_d + pred * R * H + r[:, None] * H + cols[None, :], mask=m)
        new = p + sig * (a - p)
        if MULTI:
            new += tl.load(S_d + node * R * H + r[:, None] * H + cols[None, :], mask=m)
        tl.store(S_d + node * R * H + r[:, None] * H + cols[None, :], new, mask=m)
    tl.debug_barrier()


@triton.jit
def forward_wave(wave, groups, edges, A_d, X_d, S_d, W_d, mh_d, r, b, bm, R, I, EW,
                 H: tl.constexpr, HAS_MASK: tl.constexpr, HAS_X: tl.constexpr, MULTI: tl.constexpr,
                 BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One wave of a step (`wave`: its row of the waves table): each group's GEMM, its edges'
    `edge_product`s (on X = prev ⊙ m_h where the backward needs X), then each edge's `highway`."""
    g, g_end = tl.load(wave), tl.load(wave + 1)
    while g < g_end:
        e, e_end = tl.load(groups + 4 * g), tl.load(groups + 4 * g + 1)
        slot, pred = tl.load(groups + 4 * g + 2), tl.load(groups + 4 * g + 3)
        src, src_row = S_d + pred * R * H, H
        if HAS_X:
            masked_input(X_d, S_d, mh_d, slot, pred, r, b, bm, R, I, H, HAS_MASK, BLOCK_H)
            src, src_row = X_d + slot * H, I * H
        while e < e_end:
            edge_product(A_d, W_d, src, src_row, e, tl.load(edges + 3 * e + 2), r, bm, EW, H, BLOCK_N, BLOCK_K)
            e += 1
        g += 1
    tl.debug_barrier()
    e, e_end = tl.load(wave + 2), tl.load(wave + 3)
    while e < e_end:
        highway(A_d, S_d, e, tl.load(edges + 3 * e), tl.load(edges + 3 * e + 1), r, bm, R, EW, H, MULTI, BLOCK_H)
        e += 1


@triton.jit
def step_output(S_d, out_d, concat, n_concat, inv_concat, r, bm, r_next, bm_next, R,
                H: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr):
    """h_t, the mean of the concat states, into `out` and into S slot 0 of the next step's rows."""
    for c in range(0, H, BLOCK_H):
        cols = c + tl.arange(0, BLOCK_H)
        m = bm[:, None] & (cols < H)[None, :]
        total = tl.full((BLOCK_B, BLOCK_H), 0.0, out_d.dtype.element_ty)
        q = 0
        while q < n_concat:
            total += tl.load(S_d + tl.load(concat + q) * R * H + r[:, None] * H + cols[None, :], mask=m, other=0.0)
            q += 1
        h = total * inv_concat
        tl.store(out_d + r[:, None] * H + cols[None, :], h, mask=m)
        tl.store(S_d + r_next[:, None] * H + cols[None, :], h, mask=bm_next[:, None] & (cols < H)[None, :])
    tl.debug_barrier()


@triton.jit
def forward(counts, offsets, h0, mh, wb, X, A, S, out,
            waves, groups, edges, concat,
            T, B, R, E, I, NS, n_waves, n_concat, inv_concat,
            H: tl.constexpr, HAS_MASK: tl.constexpr, HAS_X: tl.constexpr, MULTI: tl.constexpr,
            BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One program per direction and block of sequences: at every step each wave (`forward_wave`), then h_t
    (`step_output`). Fills X (with HAS_X), A, S and out."""
    d = tl.program_id(0)
    b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    EW = E * 2 * H
    A_d, X_d, S_d, W_d, mh_d = A + d * R * EW, X + d * R * I * H, S + d * NS * R * H, wb + d * H * EW, mh + d * B * H
    copy_rows(S_d, b, h0 + d * B * H, b, b < tl.load(counts), H, BLOCK_H)  # h_{-1} = h0: S slot 0 of step 0's rows
    tl.debug_barrier()
    t = 0
    while t < T:
        bm = b < tl.load(counts + t)
        r = tl.load(offsets + t) + b
        w = 0
        while w < n_waves:
            forward_wave(waves + 4 * w, groups, edges, A_d, X_d, S_d, W_d, mh_d, r, b, bm, R, I, EW,
                         H, HAS_MASK, HAS_X, MULTI, BLOCK_H, BLOCK_N, BLOCK_K)
            w += 1
        bm_next, r_next = b < tl.load(counts + t + 1), tl.load(offsets + t + 1) + b
        step_output(S_d, out + d * R * H, concat, n_concat, inv_concat, r, bm, r_next, bm_next, R,
                    H, BLOCK_B, BLOCK_H)
        t += 1


# ---- backward --------------------------------------------------------------------------------------


@triton.jit
def step_grad(GS_d, go_d, concat, n_concat, scale, r, b, bm, carried, B, H: tl.constexpr, BLOCK_H: tl.constexpr):
    """∂h_t, the output's and step t + 1's (GS slot 0, for the sequences `carried` on), times 1/|concat|,
    into each concat state's slot of GS."""
    for c in range(0, H, BLOCK_H):
        cols = c + tl.arange(0, BLOCK_H)
        m = bm[:, None] & (cols < H)[None, :]
        gh = tl.load(go_d + r[:, None] * H + cols[None, :], mask=m, other=0.0)
        gh += tl.load(GS_d + b[:, None] * H + cols[None, :], mask=carried[:, None] & (cols < H)[None, :], other=0.0)
        gh = gh * scale
        q = 0
        while q < n_concat:
            tl.store(GS_d + tl.load(concat + q) * B * H + b[:, None] * H + cols[None, :], gh, mask=m)
            q += 1


@triton.jit
def highway_grad(A_d, G_d, S_d, GS_d, e, node, pred, code, r, b, bm, R, B, EW,
                 H: tl.constexpr, BLOCK_H: tl.constexpr):
    """Edge e's highway backward: G = [∂c | ∂h] from ∂s, and ∂p through the highway alone, grad·(1 − σ(c))."""
    for c in range(0, H, BLOCK_H):
        cols = c + tl.arange(0, BLOCK_H)
        m = bm[:, None] & (cols < H)[None, :]
        grad = tl.load(GS_d + node * B * H + b[:, None] * H + cols[None, :], mask=m, other=0.0)
        p = tl.load(S_d + pred * R * H + r[:, None] * H + cols[None, :], mask=m, other=0.0)
        at = A_d + r[:, None] * EW + e * 2 * H + cols[None, :]
        sig = tl.load(at, mask=m, other=0.0)
        a = tl.load(at + H, mask=m, other=0.0)
        grad_a = grad * sig
        gt = G_d + r[:, None] * EW + e * 2 * H + cols[None, :]
        tl.store(gt, grad * (a - p) * (sig - sig * sig), mask=m)
        tl.store(gt + H, grad_a * derivative(a, code), mask=m)
        at_pred = GS_d + pred * B * H + b[:, None] * H + cols[None, :]
        tl.store(at_pred, tl.load(at_pred, mask=m, other=0.0) + grad - grad_a, mask=m)
    tl.debug_barrier()


@triton.jit
def group_grad(G_d, W_d, GS_d, mh_d, e_first, e_end, pred, r, b, bm, B, EW,
               H: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """Through a group's GEMM: ∂prev += (G·[W_i | W_j | …]ᵀ) ⊙ m_h, a tile of columns at a time."""
    H2: tl.constexpr = 2 * H
    for n in range(0, H, BLOCK_N):
        cols = n + tl.arange(0, BLOCK_N)
        m = bm[:, None] & (cols < H)[None, :]
        acc = tl.full((BLOCK_B, BLOCK_N), 0.0, G_d.dtype.element_ty)
        e = e_first
        while e < e_end:
            for k in range(0, H2, BLOCK_K):
                ks = k + tl.arange(0, BLOCK_K)
                gt = tl.load(G_d + r[:, None] * EW + e * H2 + ks[None, :], mask=bm[:, None] & (ks < H2)[None, :],
                             other=0.0)
                w_tile = tl.load(W_d + (e * H2 + ks)[:, None] * H + cols[None, :],
                                 mask=(ks < H2)[:, None] & (cols < H)[None, :], other=0.0)
                acc += tl.dot(gt, w_tile, input_precision="ieee")
            e += 1
        if HAS_MASK:
            acc = acc * tl.load(mh_d + b[:, None] * H + cols[None, :], mask=m, other=0.0)
        at_pred = GS_d + pred * B * H + b[:, None] * H + cols[None, :]
        tl.store(at_pred, tl.load(at_pred, mask=m, other=0.0) + acc, mask=m)
    tl.debug_barrier()


@triton.jit
def backward_wave(wave, groups, edges, A_d, G_d, S_d, GS_d, W_d, mh_d, r, b, bm, R, B, EW,
                  H: tl.constexpr, HAS_MASK: tl.constexpr,
                  BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One wave of a step in reverse: each edge's `highway_grad`, then each group's `group_grad`."""
    e, e_end = tl.load(wave + 2), tl.load(wave + 3)
    while e < e_end:
        node, pred, code = tl.load(edges + 3 * e), tl.load(edges + 3 * e + 1), tl.load(edges + 3 * e + 2)
        highway_grad(A_d, G_d, S_d, GS_d, e, node, pred, code, r, b, bm, R, B, EW, H, BLOCK_H)
        e += 1
    g, g_end = tl.load(wave), tl.load(wave + 1)
    while g < g_end:
        first, end, pred = tl.load(groups + 4 * g), tl.load(groups + 4 * g + 1), tl.load(groups + 4 * g + 3)
        group_grad(G_d, W_d, GS_d, mh_d, first, end, pred, r, b, bm, B, EW, H, HAS_MASK, BLOCK_B, BLOCK_N, BLOCK_K)
        g += 1


@triton.jit
def backward(counts, offsets, grad_out, mh, wt, A, S, G, GS, grad_h0,
             waves, groups, edges, concat,
             T, B, R, E, NS, n_waves, n_concat, scale,
             H: tl.constexpr, HAS_MASK: tl.constexpr,
             BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The forward's steps in reverse: per step ∂h_t into the concat states (`step_grad`), then each wave in
    reverse (`backward_wave`). Fills G and ∂h0. GS holds ∂ of every state of the step, per sequence; slot 0
    carries ∂h_{t-1} to the step before. `wt`: the weights transposed, (E·2H, H) per direction."""
    d = tl.program_id(0)
    b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    EW = E * 2 * H
    A_d, G_d, S_d, W_d = A + d * R * EW, G + d * R * EW, S + d * NS * R * H, wt + d * EW * H
    GS_d, mh_d = GS + d * NS * B * H, mh + d * B * H
    t = T - 1
    while t >= 0:
        bm = b < tl.load(counts + t)
        r = tl.load(offsets + t) + b
        s = 1
        while s < NS:
            fill_rows(GS_d + s * B * H, b, bm, H, BLOCK_B, BLOCK_H)
            s += 1
        tl.debug_barrier()
        step_grad(GS_d, grad_out + d * R * H, concat, n_concat, scale, r, b, bm, b < tl.load(counts + t + 1), B,
                  H, BLOCK_H)
        tl.debug_barrier()
        fill_rows(GS_d, b, bm, H, BLOCK_B, BLOCK_H)  # ∂h_{t-1} starts at zero
        tl.debug_barrier()
        w = n_waves - 1
        while w >= 0:
            backward_wave(waves + 4 * w, groups, edges, A_d, G_d, S_d, GS_d, W_d, mh_d, r, b, bm, R, B, EW,
                          H, HAS_MASK, BLOCK_B, BLOCK_H, BLOCK_N, BLOCK_K)
            w -= 1
        t -= 1
    copy_rows(grad_h0 + d * B * H, b, GS_d, b, b < tl.load(counts), H, BLOCK_H)
