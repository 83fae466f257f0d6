// strided_copy.cu: the same copy, with only the read pattern changed.
//
// Lesson (notebook 07, coalescing): a warp's 32 loads are served together.
// When the 32 threads read 32 neighbouring floats, the hardware fetches
// 128 contiguous bytes (four 32-byte sectors) and every byte is used. When
// neighbouring threads read floats `stride` apart, each float sits in its own
// sector once stride >= 8 (8 floats = 32 bytes), so the memory system moves up
// to 8 times the bytes the program uses.
//
// The trick that keeps the comparison fair: the kernel always copies all n
// floats, each exactly once, whatever the stride; it just visits them in a
// different order. View the input as an m x stride matrix (m = n / stride,
// row-major) and the output as its stride x m transpose:
//
//     out[q * m + r] = in[r * stride + q]      for q < stride, r < m
//
// Writes go to consecutive addresses (coalesced) for every stride; reads by
// neighbouring threads (r, r + 1) are `stride` floats apart. stride = 1 is a
// plain copy. The effective bandwidth is the useful bytes (n floats read +
// n floats written) divided by the time, so it falls exactly as much as the
// wasted sectors cost. Only the reads waste sectors: at stride s the copy
// moves min(s, 8) + 1 units of sectors where a plain copy moves 2, so the
// model predicts 2 / (min(s, 8) + 1) of the copy rate: 67% at s = 2, 40% at
// s = 4, 22% from s = 8 on (labkit.check.kernels.copy_rate_fraction). If the
// L2 fetches from DRAM in pieces larger than a sector (a hint the runtime
// exposes as cudaLimitMaxL2FetchGranularity), the floor is lower and later.
//
// Launch: blockDim = (B, 1, 1) for any B <= 1024 (a runtime choice, no
// recompiling), gridDim = (ceil(m / (B * ITEMS_PER_THREAD)), stride, 1).
// n must be a multiple of stride, and stride <= 65535 (the grid's y limit);
// the launcher checks both.

#ifndef ITEMS_PER_THREAD
#define ITEMS_PER_THREAD 4  // floats per thread: independent loads in flight hide latency
#endif

extern "C" __global__ void strided_copy(const float* __restrict__ in, float* __restrict__ out,
                                        int n, int stride)
{
    const unsigned int m = (unsigned int)n / (unsigned int)stride;  // rows of the m x stride view
    const unsigned int q = blockIdx.y;                               // which column of the view
    const unsigned int first = blockIdx.x * blockDim.x * ITEMS_PER_THREAD + threadIdx.x;

    // Issue every load before the first store: ITEMS_PER_THREAD requests per
    // thread are in flight at once instead of one.
    float v[ITEMS_PER_THREAD];
#pragma unroll
    for (int k = 0; k < ITEMS_PER_THREAD; ++k) {
        const unsigned int r = first + k * blockDim.x;  // neighbouring threads: neighbouring r
        if (r < m) {
            v[k] = in[(size_t)r * stride + q];  // stride floats apart across the warp
        }
    }
#pragma unroll
    for (int k = 0; k < ITEMS_PER_THREAD; ++k) {
        const unsigned int r = first + k * blockDim.x;
        if (r < m) {
            out[(size_t)q * m + r] = v[k];  // always contiguous across the warp
        }
    }
}
