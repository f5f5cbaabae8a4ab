// nv_mma_probe: whether NVIDIA's OpenCL compiler takes inline PTX for the tensor cores and computes
// with it (lib/opencl/nv_mma_probe.cpp runs it once per device on NVIDIA's driver only; no other
// compiler is given this file).
//
// One work-group of 32 work-items (one warp): D (16 x 8, f32) = A (16 x 16) * B (16 x 8), f16 inputs
// given as their bits, with mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32. Fragments as in the
// PTX ISA (and cuda_backend/common.cuh, mma_16816), with g = lane / 4, t = lane % 4:
//   a0: row g, k 2t..2t+1   a1: row g+8, k 2t..2t+1   a2: row g, k 2t+8..2t+9   a3: row g+8, k 2t+8..2t+9
//   b0: k 2t..2t+1, column g   b1: k 2t+8..2t+9, column g
//   d0, d1: row g, columns 2t, 2t+1   d2, d3: row g+8, columns 2t, 2t+1
// out[0..127] = D in row-major order; out[128 + i] = the %laneid work-item i read (it must be i).
// KVC_ASM is the inline-assembly keyword, a build define: `__asm__` (clang's spelling in OpenCL C)
// or `asm`; the host tries both.

uint kvc_pack_halves(global const ushort * p) {
    return (uint)p[0] | ((uint)p[1] << 16);
}

kernel void kvc_nv_mma_probe(global const ushort * a, global const ushort * b_t, global float * out) {
    const uint lane = (uint)get_local_id(0);
    uint hw_lane;
    KVC_ASM volatile("mov.u32 %0, %%laneid;" : "=r"(hw_lane));
    const uint g = lane >> 2, t = lane & 3;
    const uint a0 = kvc_pack_halves(a + g * 16 + 2 * t), a1 = kvc_pack_halves(a + (g + 8) * 16 + 2 * t);
    const uint a2 = kvc_pack_halves(a + g * 16 + 2 * t + 8), a3 = kvc_pack_halves(a + (g + 8) * 16 + 2 * t + 8);
    // b_t: B transposed (8 rows = columns of B, 16 k each), so a column's k pair is adjacent.
    const uint b0 = kvc_pack_halves(b_t + g * 16 + 2 * t), b1 = kvc_pack_halves(b_t + g * 16 + 2 * t + 8);
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
    KVC_ASM volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    out[g * 8 + 2 * t] = d0;
    out[g * 8 + 2 * t + 1] = d1;
    out[(g + 8) * 8 + 2 * t] = d2;
    out[(g + 8) * 8 + 2 * t + 1] = d3;
    out[128 + lane] = (float)hw_lane;
}
