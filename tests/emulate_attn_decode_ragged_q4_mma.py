# CPU emulation of the fragment code of cuda_backend/attn_decode_ragged_q4_mma.cu (no GPU needed):
# load_q_frags, tile_scores and tile_values on one 16-row step of 4-bit rows (core/ragged_q4.h: f16
# min and step, then 4-bit codes), with the stage bytes laid out as the kernel reads them (rows
# back to back, a word read past a row's end sees the next row's bytes) and rows past `hi` clamped.
# Checks the scores q.k^ of every head and row and sum_t p_t v^_tc per head and channel against
# the dequantized rows; a layout mistake gives O(1) errors. Exit status 1 on failure.
# Keep it in step with the kernel when its fragment code changes. Run: python3 tests/emulate_attn_decode_ragged_q4_mma.py
import random
import struct
import sys

from mma_emulation import f16, f32, halves, code_pair, byte_perm, mma, pack, movmatrix

random.seed(3)
EX = 4  # code_pair's BITS


def row_bytes(w):
    return 4 + 4 * ((w + 7) // 8)


def q4_row(x):  # core/ragged_q4.h quantizer: bytes of one row, and its dequantized values
    mn, mx = min(x), max(x)
    lo, step = f16(mn), f16((mx - mn) / 15)
    codes = [0 if step == 0 else min(max(round((v - lo) / step), 0), 15) for v in x]
    codes += [0] * (2 * (row_bytes(len(x)) - 4) - len(codes))
    b = bytearray(struct.pack('<ee', lo, step))
    for i in range(0, len(codes), 2):
        b.append(codes[i] | codes[i + 1] << 4)
    return bytes(b), [c * step + lo for c in codes[:len(x)]]


def word(stage, off):
    return struct.unpack_from('<I', stage, off)[0]


def check(kw, vw, hi, nh=4):
    T = 16
    kr, vr = row_bytes(kw), row_bytes(vw)
    krows = [q4_row([random.gauss(0, 1) for _ in range(kw)]) for _ in range(T)]
    vrows = [q4_row([random.gauss(0, 1) for _ in range(vw)]) for _ in range(T)]
    # the stage: T K rows, then T V rows, then 16 bytes of slack (garbage)
    stage = b''.join(r[0] for r in krows) + b''.join(r[0] for r in vrows) + bytes(random.randrange(256) for _ in range(16))
    vbase = T * kr
    q = [[f32(random.gauss(0, 1)) if h < nh else 0.0 for _ in range(kw)] for h in range(4)]
    NG = (kw + 31) // 32
    ex = ((15 + EX) << 10) * 0x10001

    # load_q_frags: bq[2G + s][lane] = (b0, b1), qsum per lane (head t)
    def part(h, lo_part, c):
        x = q[h][c] if c < kw else 0.0
        xh = f16(x)
        return f16(x - xh) if lo_part else xh
    bq = [[None] * 32 for _ in range(2 * NG)]
    for lane in range(32):
        g, tq = lane >> 2, lane & 3
        h, lo_part = g >> 1, g & 1
        for G in range(NG):
            for s in range(2):
                c = 32 * G + 8 * tq + 2 * s
                bq[2 * G + s][lane] = (pack(part(h, lo_part, c), part(h, lo_part, c + 4)),
                                       pack(part(h, lo_part, c + 1), part(h, lo_part, c + 5)))
    qsum = [sum(q[lane & 3]) for lane in range(32)]

    # tile_scores
    s, s2 = [[0.0] * 4 for _ in range(32)], [[0.0] * 4 for _ in range(32)]
    for G in range(NG):
        A0, A1 = [], []
        for lane in range(32):
            g, tq = lane >> 2, lane & 3
            ra, rb = min(g, hi - 1), min(g + 8, hi - 1)
            xa, xb = word(stage, ra * kr + 4 + 4 * tq + 16 * G), word(stage, rb * kr + 4 + 4 * tq + 16 * G)
            A0.append([code_pair(xa, 6, EX), code_pair(xb, 6, EX), code_pair(xa, 2, EX), code_pair(xb, 2, EX)])
            A1.append([code_pair(xa, 30, EX), code_pair(xb, 30, EX), code_pair(xa, 26, EX), code_pair(xb, 26, EX)])
        C0 = mma(A0, [bq[2 * G][l] for l in range(32)])
        C1 = mma(A1, [bq[2 * G + 1][l] for l in range(32)])
        for l in range(32):
            s[l] = [s[l][i] + C0[l][i] for i in range(4)]
            s2[l] = [s2[l][i] + C1[l][i] for i in range(4)]
    err = 0.0
    sc = [[None] * 16 for _ in range(4)]
    for lane in range(32):
        g, tq = lane >> 2, lane & 3
        for rr, (i0, i1) in ((g, (0, 1)), (g + 8, (2, 3))):
            r = min(rr, hi - 1)
            mn, st = struct.unpack_from('<ee', stage, r * kr)
            f = (s[lane][i0] + s2[lane][i0]) + (s[lane][i1] + s2[lane][i1])
            val = st * f + (mn - 16.0 * st) * qsum[lane]
            if rr < hi:
                ref = sum(q[tq][c] * krows[rr][1][c] for c in range(kw))
                err = max(err, abs(val - ref) / (abs(ref) + 1))
                sc[tq][rr] = val
    ok = err < 1e-4

    # tile_values with weights p (head t, rows g and g + 8; 0 past hi)
    p = [[random.random() if r < hi else 0.0 for r in range(16)] for _ in range(4)]
    bias = [0.0] * 32
    regA, regB = [], []
    for lane in range(32):
        g, tq = lane >> 2, lane & 3
        pa = struct.unpack_from('<ee', stage, vbase + min(g, hi - 1) * vr)
        pb = struct.unpack_from('<ee', stage, vbase + min(g + 8, hi - 1) * vr)
        p0, p1 = p[tq][g], p[tq][g + 8]
        bias[lane] = p0 * (pa[0] - 16.0 * pa[1]) + p1 * (pb[0] - 16.0 * pb[1])
        w0, w1 = p0 * pa[1], p1 * pb[1]
        regA.append(pack(f16(w0), f16(w0 - f16(w0))))
        regB.append(pack(f16(w1), f16(w1 - f16(w1))))
    b0s, b1s = movmatrix(regA), movmatrix(regB)
    head_bias = [sum(bias[l] for l in range(32) if (l & 3) == t) for t in range(4)]
    NV = (vw + 15) // 16
    errv = 0.0
    for m in range(NV):
        Af = []
        for lane in range(32):
            g, tq = lane >> 2, lane & 3
            b = g & 3
            sel = b | b << 4 | (4 + b) << 8 | (4 + b) << 12
            off = 4 + 4 * (g >> 2) + 8 * m
            r = [vbase + min(2 * tq + d, hi - 1) * vr + off for d in (0, 1, 8, 9)]
            x01 = byte_perm(word(stage, r[0]), word(stage, r[1]), sel)
            x89 = byte_perm(word(stage, r[2]), word(stage, r[3]), sel)
            Af.append([code_pair(x01, 6, EX), code_pair(x01, 2, EX), code_pair(x89, 6, EX), code_pair(x89, 2, EX)])
        C = mma(Af, [(b0s[l], b1s[l]) for l in range(32)])
        for lane in range(32):
            g, tq = lane >> 2, lane & 3
            for c, (i0, i1) in ((16 * m + 2 * g, (0, 1)), (16 * m + 2 * g + 1, (2, 3))):
                if c >= vw:
                    continue
                val = C[lane][i0] + C[lane][i1] + head_bias[tq]
                ref = sum(p[tq][rr] * vrows[rr][1][c] for rr in range(hi))
                errv = max(errv, abs(val - ref) / (abs(ref) + 1))
    print(f"kw {kw} vw {vw} hi {hi}: score max rel err {err:.2e}, PV max rel err {errv:.2e}")
    return ok and errv < 1e-4


ok = True
for kw, vw, hi in ((128, 80, 16), (40, 48, 13), (112, 16, 9), (8, 24, 16), (64, 64, 1)):
    ok = check(kw, vw, hi) and ok
ok = check(96, 32, 11, nh=3) and ok
print('OK' if ok else 'FAILED')
sys.exit(0 if ok else 1)
