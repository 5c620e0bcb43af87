"""The Triton kernels of `nas.fast.triton_loop` (imported by it on first use: Triton is optional).

`triton.jit` reads TRITON_INTERPRET when it decorates, so this module is imported once per mode. Loops
whose bounds are read from the plan's tables or the step count are `while` loops, and the hidden size
is a compile-time constant: the interpreter takes neither a loaded scalar nor an argument as a `range`
bound. Zeros are `tl.full`, not `tl.zeros`: Triton's own jitted helpers are decorated when Triton is
imported, and the interpreter cannot run them when that was before TRITON_INTERPRET was set.
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
def forward(
    counts,
    offsets,
    h0,
    mh,
    wb,
    X,
    A,
    S,
    out,
    waves,
    groups,
    edges,
    concat,
    T,
    B,
    R,
    E,
    I,
    NS,
    n_waves,
    n_concat,
    inv_concat,
    H: tl.constexpr,
    HAS_MASK: tl.constexpr,
    HAS_X: tl.constexpr,
    MULTI: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    d = tl.program_id(0)
    b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    jh = tl.arange(0, BLOCK_H)
    j = tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    H2: tl.constexpr = 2 * H
    EW = E * H2
    A_d = A + d * R * EW
    X_d = X + d * R * I * H
    S_d = S + d * NS * R * H
    out_d = out + d * R * H
    W_d = wb + d * H * EW
    h0_d = h0 + d * B * H
    mh_d = mh + d * B * H
    bm = b < tl.load(counts)
    for c in range(0, H, BLOCK_H):  # h_{-1} = h0: S slot 0 of step 0's rows (rows 0..B-1)
        cols = c + jh
        m = bm[:, None] & (cols < H)[None, :]
        tl.store(S_d + b[:, None] * H + cols[None, :], tl.load(h0_d + b[:, None] * H + cols[None, :], mask=m), mask=m)
    tl.debug_barrier()
    t = 0
    while t < T:
        bm = b < tl.load(counts + t)
        r = tl.load(offsets + t) + b
        w = 0
        while w < n_waves:
            g = tl.load(waves + 4 * w)
            g_end = tl.load(waves + 4 * w + 1)
            while g < g_end:  # each group's GEMM, a tile of columns at a time, activated into A
                e = tl.load(groups + 4 * g)
                e_end = tl.load(groups + 4 * g + 1)
                slot = tl.load(groups + 4 * g + 2)
                pred = tl.load(groups + 4 * g + 3)
                if HAS_X:  # X = prev ⊙ m_h, kept for the backward's weight gradients
                    for c in range(0, H, BLOCK_H):
                        cols = c + jh
                        m = bm[:, None] & (cols < H)[None, :]
                        v = tl.load(S_d + pred * R * H + r[:, None] * H + cols[None, :], mask=m)
                        if HAS_MASK:
                            v = v * tl.load(mh_d + b[:, None] * H + cols[None, :], mask=m)
                        tl.store(X_d + r[:, None] * (I * H) + slot * H + cols[None, :], v, mask=m)
                    tl.debug_barrier()
                    src = X_d + slot * H
                    src_row = I * H
                else:
                    src = S_d + pred * R * H
                    src_row = H
                while e < e_end:
                    code = tl.load(edges + 3 * e + 2)
                    for n in range(0, H2, BLOCK_N):
                        cols = n + j
                        m = bm[:, None] & (cols < H2)[None, :]
                        # wave 0's edge adds to the input projection A already holds
                        acc = tl.load(A_d + r[:, None] * EW + e * H2 + cols[None, :], mask=m & (e == 0), other=0.0)
                        for k in range(0, H, BLOCK_K):
                            ks = k + kk
                            x = tl.load(
                                src + r[:, None] * src_row + ks[None, :],
                                mask=bm[:, None] & (ks < H)[None, :],
                                other=0.0,
                            )
                            wt = tl.load(
                                W_d + ks[:, None] * EW + e * H2 + cols[None, :],
                                mask=(ks < H)[:, None] & (cols < H2)[None, :],
                                other=0.0,
                            )
                            acc += tl.dot(x, wt, input_precision="ieee")
                        act = tl.where((cols < H)[None, :], sigmoid(acc), activate(acc, code))
                        tl.store(A_d + r[:, None] * EW + e * H2 + cols[None, :], act, mask=m)
                    e += 1
                g += 1
            tl.debug_barrier()
            e = tl.load(waves + 4 * w + 2)
            e_end = tl.load(waves + 4 * w + 3)
            while e < e_end:  # each edge's highway into its node's state
                node = tl.load(edges + 3 * e)
                pred = tl.load(edges + 3 * e + 1)
                for c in range(0, H, BLOCK_H):
                    cols = c + jh
                    m = bm[:, None] & (cols < H)[None, :]
                    at = A_d + r[:, None] * EW + e * H2 + cols[None, :]
                    sig = tl.load(at, mask=m)
                    a = tl.load(at + H, mask=m)
                    p = tl.load(S_d + pred * R * H + r[:, None] * H + cols[None, :], mask=m)
                    new = p + sig * (a - p)
                    if MULTI:  # several edges into one node add up (S starts at zero)
                        new += tl.load(S_d + node * R * H + r[:, None] * H + cols[None, :], mask=m)
                    tl.store(S_d + node * R * H + r[:, None] * H + cols[None, :], new, mask=m)
                tl.debug_barrier()
                e += 1
            w += 1
        bm_next = b < tl.load(counts + t + 1)
        r_next = tl.load(offsets + t + 1) + b
        for c in range(0, H, BLOCK_H):  # h_t, the mean of the concat states; S slot 0 of the next step
            cols = c + jh
            m = bm[:, None] & (cols < H)[None, :]
            total = tl.full((BLOCK_B, BLOCK_H), 0.0, out.dtype.element_ty)
            q = 0
            while q < n_concat:
                total += tl.load(S_d + tl.load(concat + q) * R * H + r[:, None] * H + cols[None, :], mask=m, other=0.0)
                q += 1
            h = total * inv_concat
            tl.store(out_d + r[:, None] * H + cols[None, :], h, mask=m)
            m_next = bm_next[:, None] & (cols < H)[None, :]
            tl.store(S_d + r_next[:, None] * H + cols[None, :], h, mask=m_next)
        tl.debug_barrier()
        t += 1


@triton.jit
def backward(
    counts,
    offsets,
    grad_out,
    mh,
    wt,
    A,
    S,
    G,
    GS,
    grad_h0,
    waves,
    groups,
    edges,
    concat,
    T,
    B,
    R,
    E,
    NS,
    n_waves,
    n_concat,
    scale,
    H: tl.constexpr,
    HAS_MASK: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    d = tl.program_id(0)
    b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    jh = tl.arange(0, BLOCK_H)
    j = tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    H2: tl.constexpr = 2 * H
    EW = E * H2
    A_d = A + d * R * EW
    G_d = G + d * R * EW
    S_d = S + d * NS * R * H
    W_d = wt + d * EW * H  # the weights transposed, (E·2H, H) per direction
    GS_d = GS + d * NS * B * H  # ∂ of every state of this step, per sequence; slot 0 carries ∂h_{t-1}
    go_d = grad_out + d * R * H
    mh_d = mh + d * B * H
    zeros = tl.full((BLOCK_B, BLOCK_H), 0.0, GS.dtype.element_ty)
    t = T - 1
    while t >= 0:
        bm = b < tl.load(counts + t)
        carried = b < tl.load(counts + t + 1)
        r = tl.load(offsets + t) + b
        s = 1
        while s < NS:
            for c in range(0, H, BLOCK_H):
                cols = c + jh
                m = bm[:, None] & (cols < H)[None, :]
                tl.store(GS_d + s * B * H + b[:, None] * H + cols[None, :], zeros, mask=m)
            s += 1
        tl.debug_barrier()
        for c in range(0, H, BLOCK_H):  # ∂h_t: the output's and step t + 1's, to each concat state
            cols = c + jh
            m = bm[:, None] & (cols < H)[None, :]
            gh = tl.load(go_d + r[:, None] * H + cols[None, :], mask=m, other=0.0)
            carry = carried[:, None] & (cols < H)[None, :]
            gh += tl.load(GS_d + b[:, None] * H + cols[None, :], mask=carry, other=0.0)
            gh = gh * scale
            q = 0
            while q < n_concat:
                tl.store(GS_d + tl.load(concat + q) * B * H + b[:, None] * H + cols[None, :], gh, mask=m)
                q += 1
        tl.debug_barrier()
        for c in range(0, H, BLOCK_H):
            cols = c + jh
            m = bm[:, None] & (cols < H)[None, :]
            tl.store(GS_d + b[:, None] * H + cols[None, :], zeros, mask=m)
        tl.debug_barrier()
        w = n_waves - 1
        while w >= 0:
            e = tl.load(waves + 4 * w + 2)
            e_end = tl.load(waves + 4 * w + 3)
            while e < e_end:  # each edge's highway: G = [∂c | ∂h], and ∂p through the highway alone
                node = tl.load(edges + 3 * e)
                pred = tl.load(edges + 3 * e + 1)
                code = tl.load(edges + 3 * e + 2)
                for c in range(0, H, BLOCK_H):
                    cols = c + jh
                    m = bm[:, None] & (cols < H)[None, :]
                    grad = tl.load(GS_d + node * B * H + b[:, None] * H + cols[None, :], mask=m, other=0.0)
                    p = tl.load(S_d + pred * R * H + r[:, None] * H + cols[None, :], mask=m, other=0.0)
                    at = A_d + r[:, None] * EW + e * H2 + cols[None, :]
                    sig = tl.load(at, mask=m, other=0.0)
                    a = tl.load(at + H, mask=m, other=0.0)
                    grad_a = grad * sig
                    gt = G_d + r[:, None] * EW + e * H2 + cols[None, :]
                    tl.store(gt, grad * (a - p) * (sig - sig * sig), mask=m)
                    tl.store(gt + H, grad_a * derivative(a, code), mask=m)
                    at_pred = GS_d + pred * B * H + b[:, None] * H + cols[None, :]
                    tl.store(at_pred, tl.load(at_pred, mask=m, other=0.0) + grad - grad_a, mask=m)
                tl.debug_barrier()
                e += 1
            g = tl.load(waves + 4 * w)
            g_end = tl.load(waves + 4 * w + 1)
            while g < g_end:  # through each group's GEMM: ∂prev += (G·[W_i | W_j | …]ᵀ) ⊙ m_h
                e_first = tl.load(groups + 4 * g)
                e_end = tl.load(groups + 4 * g + 1)
                pred = tl.load(groups + 4 * g + 3)
                for n in range(0, H, BLOCK_N):
                    cols = n + j
                    m = bm[:, None] & (cols < H)[None, :]
                    acc = tl.full((BLOCK_B, BLOCK_N), 0.0, G.dtype.element_ty)
                    e = e_first
                    while e < e_end:
                        for k in range(0, H2, BLOCK_K):
                            ks = k + kk
                            gt = tl.load(
                                G_d + r[:, None] * EW + e * H2 + ks[None, :],
                                mask=bm[:, None] & (ks < H2)[None, :],
                                other=0.0,
                            )
                            w_tile = tl.load(
                                W_d + (e * H2 + ks)[:, None] * H + cols[None, :],
                                mask=(ks < H2)[:, None] & (cols < H)[None, :],
                                other=0.0,
                            )
                            acc += tl.dot(gt, w_tile, input_precision="ieee")
                        e += 1
                    if HAS_MASK:
                        acc = acc * tl.load(mh_d + b[:, None] * H + cols[None, :], mask=m, other=0.0)
                    at_pred = GS_d + pred * B * H + b[:, None] * H + cols[None, :]
                    tl.store(at_pred, tl.load(at_pred, mask=m, other=0.0) + acc, mask=m)
                tl.debug_barrier()
                g += 1
            w -= 1
        t -= 1
    bm = b < tl.load(counts)
    for c in range(0, H, BLOCK_H):
        cols = c + jh
        m = bm[:, None] & (cols < H)[None, :]
        tl.store(
            grad_h0 + d * B * H + b[:, None] * H + cols[None, :],
            tl.load(GS_d + b[:, None] * H + cols[None, :], mask=m),
            mask=m,
        )
