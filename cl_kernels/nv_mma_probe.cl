// nv_mma_probe: whether NVIDIA's OpenCL compiler takes inline PTX for the tensor cores and computes
// with it (lib/opencl/nv_mma_probe.cpp runs it once per device on NVIDIA's driver only; no other
// compiler is given this file).
//
// One work-group of 32 work-items (one warp): D (16 x 8, f32) = A (16 x 16) * B (16 x 8), f16 inputs
// given as their bits, with common.cl's KVC_MMA_16816, the macro the kernels' tensor-core paths use
// (its fragment layout is documented there). out[0..127] = D in row-major order; out[128 + i] = the
// %laneid work-item i read (it must be i).
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
    KVC_MMA_16816(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1);
    out[g * 8 + 2 * t] = d0;
    out[g * 8 + 2 * t + 1] = d1;
    out[(g + 8) * 8 + 2 * t] = d2;
    out[(g + 8) * 8 + 2 * t + 1] = d3;
    out[128 + lane] = (float)hw_lane;
}
