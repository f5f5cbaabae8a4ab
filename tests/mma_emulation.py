# The warp-level instructions of the CUDA tensor-core decode kernels, emulated on the CPU from their
# PTX fragment layouts (mma.m16n8k16, movmatrix, byte_perm, the code_pair of cuda_backend/decode_mma.cuh),
# for tests/emulate_attn_decode_*_mma.py.
import struct
def f16(x): return struct.unpack('<e', struct.pack('<e', x))[0]
def f32(x): return struct.unpack('<f', struct.pack('<f', x))[0]
def matmul(A, B): return [[sum(A[i][k]*B[k][j] for k in range(len(B))) for j in range(len(B[0]))] for i in range(len(A))]
def f16bits_to_val(u): return struct.unpack('<e', struct.pack('<H', u & 0xffff))[0]
def halves(x): return f16bits_to_val(x & 0xffff), f16bits_to_val(x >> 16)
def rotl(x, r): r &= 31; return ((x << r) | (x >> (32 - r))) & 0xffffffff if r else x
def code_pair(x, rot, B):
    m = ((1 << B) - 1) << (10 - B); one = (15 + B) << 10
    return (rotl(x, rot) & (m | m << 16)) | (one | one << 16)
def byte_perm(x, y, s):
    b = list(struct.pack('<II', x, y)); r = 0
    for i in range(4):
        n = (s >> (4 * i)) & 0xf; assert n < 8; r |= b[n] << (8 * i)
    return r
def mma(A_frag, B_frag):  # per-lane fragments -> C per lane (list of 4)
    A = [[0.0]*16 for _ in range(16)]; Bm = [[0.0]*8 for _ in range(16)]
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a = [halves(x) for x in A_frag[lane]]
        A[g][2*t], A[g][2*t+1] = a[0]; A[g+8][2*t], A[g+8][2*t+1] = a[1]
        A[g][2*t+8], A[g][2*t+9] = a[2]; A[g+8][2*t+8], A[g+8][2*t+9] = a[3]
        b0, b1 = halves(B_frag[lane][0]), halves(B_frag[lane][1])
        Bm[2*t][g], Bm[2*t+1][g] = b0; Bm[2*t+8][g], Bm[2*t+9][g] = b1
    C = matmul(A, Bm)
    return [[C[l>>2][2*(l&3)], C[l>>2][2*(l&3)+1], C[(l>>2)+8][2*(l&3)], C[(l>>2)+8][2*(l&3)+1]] for l in range(32)]
def pack(lo, hi): return struct.unpack('<I', struct.pack('<ee', lo, hi))[0]
def movmatrix(regs):
    M = [[None]*8 for _ in range(8)]
    for l in range(32):
        g, t = l >> 2, l & 3; lo, hi = regs[l] & 0xffff, regs[l] >> 16
        M[g][2*t], M[g][2*t+1] = lo, hi
    return [M[2*(l&3)][l>>2] | (M[2*(l&3)+1][l>>2] << 16) for l in range(32)]
