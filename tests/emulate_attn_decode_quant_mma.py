# CPU emulation of the fragment code of cuda_backend/attn_decode_quant_mma.cu (no GPU needed): the
# kfrag_pos / code_pair / byte_perm / movmatrix formulas, copied from the kernel, on one tile of 16
# tokens per bit width, with mma.m16n8k16 and movmatrix emulated from their PTX fragment layouts.
# Checks that scores (q'.F for every head and token) and P'V (per head and channel) land in the
# lanes the kernel reads them from; a layout mistake gives O(1) errors. Exit status 1 on failure.
# Keep it in step with the kernel when its fragment code changes. Run: python3 tests/emulate_attn_decode_quant_mma.py
import random
from mma_emulation import f16, f32, matmul, halves, rotl, code_pair, byte_perm, mma, pack, movmatrix
random.seed(1)
def tile_row(j): return j ^ ((j >> 1) & 1)  # row of a tile's token j (the kernel's tile_row)
def kfrag_pos(c, col, B):
    kk, ci = c >> 4, c & 15
    if B == 0: reg, t, half = ci >> 3, (ci & 7) >> 1, ci & 1
    else:
        CPW, P = 32 // B, 16 // B; w, r = ci // CPW, ci % CPW; half = r // P; p = w * P + r % P; t, reg = p & 3, p >> 2
    return ((kk >> 1) * 32 + 4 * col + t) * 8 + (kk & 1) * 4 + reg * 2 + half

D = 128
ok = True
for B in (2, 4, 8):
    RB = D * B // 8; MT = D // 16; P = 16 // B
    codes = [[random.randrange(1 << B) for _ in range(D)] for _ in range(16)]
    rows = []
    for tok in range(16):
        bits = 0
        for c in range(D): bits |= int(codes[tok][c]) << (c * B)
        rows.append([(bits >> (32 * w)) & 0xffffffff for w in range(RB // 4)])
    qp = [[f32(random.gauss(0, 1)) for _ in range(D)] for _ in range(4)]
    qf = [0] * (D * 8)
    for h in range(4):
        for c in range(D):
            hi = f16(qp[h][c]); lo = f16(qp[h][c] - hi)
            qf[kfrag_pos(c, 2*h, B)] = hi; qf[kfrag_pos(c, 2*h+1, B)] = lo
    # scores
    s = [[0]*4 for _ in range(32)]
    acc = [[0.0]*4 for _ in range(32)]
    for kk in range(MT):
        Af, Bf = [], []
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            w0 = 0 if P >= 4 else t // P; j0 = t % P; w1 = 0 if P >= 8 else (t + 4) // P; j1 = (t + 4) % P
            r0 = (10 - B - j0 * B) & 31; r1 = (10 - B - j1 * B) & 31
            WPK = B // 2
            ka, kb = rows[tile_row(g)], rows[tile_row(g + 8)]
            Af.append([code_pair(ka[kk*WPK+w0], r0, B), code_pair(kb[kk*WPK+w0], r0, B), code_pair(ka[kk*WPK+w1], r1, B), code_pair(kb[kk*WPK+w1], r1, B)])
            base = ((kk >> 1) * 32 + lane) * 8 + (kk & 1) * 4
            Bf.append([pack(qf[base], qf[base+1]), pack(qf[base+2], qf[base+3])])
        C = mma(Af, Bf)
        for l in range(32): acc[l] = [acc[l][i] + C[l][i] for i in range(4)]
    # [4 heads, 16 tile tokens]: tile token j is stored in row tile_row(j)
    ref = matmul(qp, [[2.0**B + codes[tile_row(j)][c] for j in range(16)] for c in range(D)])
    err = 0
    for l in range(32):
        g, t = l >> 2, l & 3
        err = max(err, abs(acc[l][0] + acc[l][1] - ref[t][g]) / (abs(ref[t][g]) + 1), abs(acc[l][2] + acc[l][3] - ref[t][g+8]) / (abs(ref[t][g+8]) + 1))
    print("bits", B, "score max rel err", err)
    ok = ok and err < 1e-3
    # values: weights w[head][token]
    w = [[f32(random.random()) for _ in range(16)] for _ in range(4)]
    regA = [pack(f16(w[l & 3][l >> 2]), f16(w[l&3][l>>2] - f16(w[l&3][l>>2]))) for l in range(32)]
    regB = [pack(f16(w[l & 3][(l >> 2)+8]), f16(w[l&3][(l>>2)+8] - f16(w[l&3][(l>>2)+8]))) for l in range(32)]
    b0s, b1s = movmatrix(regA), movmatrix(regB)
    O = [[[0.0]*4 for _ in range(MT)] for _ in range(32)]
    for m in range(MT):
        Af, Bf = [], []
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            wv = (g * B) // 16; bb = ((2 * g * B) % 32) // 8; o = (2 * g * B) % 8
            sel = bb | ((bb + 1) & 7) << 4 | (bb + 4) << 8 | ((bb + 5) & 7) << 12
            ra_, rb_ = (10 - B - o) & 31, (10 - 2 * B - o) & 31
            vr = [rows[tile_row(2*t)], rows[tile_row(2*t+1)], rows[tile_row(2*t+8)], rows[tile_row(2*t+9)]]
            wi = m * (B // 2) + wv
            x01 = byte_perm(vr[0][wi], vr[1][wi], sel); x23 = byte_perm(vr[2][wi], vr[3][wi], sel)
            Af.append([code_pair(x01, ra_, B), code_pair(x01, rb_, B), code_pair(x23, ra_, B), code_pair(x23, rb_, B)])
            Bf.append([b0s[lane], b1s[lane]])
        C = mma(Af, Bf)
        for l in range(32): O[l][m] = C[l]
    refO = matmul(w, [[2.0**B + codes[tile_row(j)][c] for c in range(D)] for j in range(16)])  # [4, D]
    err = 0
    for l in range(32):
        g, t = l >> 2, l & 3
        for m in range(MT):
            err = max(err, abs(O[l][m][0] + O[l][m][1] - refO[t][16*m+2*g]) / abs(refO[t][16*m+2*g]), abs(O[l][m][2] + O[l][m][3] - refO[t][16*m+2*g+1]) / abs(refO[t][16*m+2*g+1]))
    print("bits", B, "PV max rel err", err)
    ok = ok and err < 1e-5

import sys
print('OK' if ok else 'FAILED')
sys.exit(0 if ok else 1)
