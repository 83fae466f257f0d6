// reduce.cu: the sum of n float32 values, from naive to warp shuffles.
//
// A reduction reads every input once and does one add per float, so its
// ceiling is the memory bandwidth: count the n * 4 bytes *read* (it writes
// almost nothing) and compare with the copy bandwidth. How close a version
// gets depends on how little it serializes:
//
//   reduce_atomic        every thread atomicAdd()s its element to one global
//                        float. The atomics to that one address are done one
//                        after another in the L2 cache: n serialized updates.
//   reduce_shared        each block sums BLOCK_SIZE * 2 elements with a tree in
//                        shared memory (log2(BLOCK_SIZE) steps, a
//                        __syncthreads() between steps), then one atomicAdd per
//                        block. Atomics drop from n to n / (2 * BLOCK_SIZE):
//                        still 524,288 updates of one address for 1 GiB of
//                        floats at BLOCK_SIZE 256, which may bound it.
//   reduce_warp_shuffle  a grid-stride loop: a fixed grid that just fills the GPU,
//                        each thread summing many float4s in a register; then
//                        __shfl_down_sync() adds across a warp through
//                        registers (no shared memory, no __syncthreads()), one
//                        value per warp goes through shared memory, and one
//                        atomicAdd per block finishes.
//
// Every version adds *out += sum: the caller zeroes *out first. Float
// addition is not associative, so the versions (and two runs of the atomic
// ones) may differ in the last bits; labkit verifies them on integer-valued
// data, whose partial sums are exact in float32 whatever the order as long as
// none exceeds 2^24 in magnitude (zero-mean values -4..4 stay far below). That makes
// the check exact, and it also hides the order dependence real data would show.

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256  // reduce_shared's block size: a power of two, 32 to 1024
#endif

// --------------------------------------------------------------------- atomic
// Launch: blockDim = (B, 1, 1) for any B, gridDim = (ceil(n / B), 1, 1).

extern "C" __global__ void reduce_atomic(const float* __restrict__ in, float* out, int n)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n) {
        atomicAdd(out, in[i]);  // n threads queue at one address
    }
}

// --------------------------------------------------------------------- shared
// Launch: blockDim = (BLOCK_SIZE, 1, 1), gridDim = (ceil(n / (2 * BLOCK_SIZE)), 1, 1).

extern "C" __global__ void reduce_shared(const float* __restrict__ in, float* out, int n)
{
    static_assert(BLOCK_SIZE >= 32 && BLOCK_SIZE <= 1024 && (BLOCK_SIZE & (BLOCK_SIZE - 1)) == 0,
                  "BLOCK_SIZE must be a power of two from 32 to 1024");
    __shared__ float partial[BLOCK_SIZE];

    const unsigned int tid = threadIdx.x;
    const size_t i = (size_t)blockIdx.x * (2 * BLOCK_SIZE) + tid;

    // Two elements per thread, added while loading, so no thread is idle in
    // the first step of the tree.
    float v = 0.0f;
    if (i < (size_t)n) v = in[i];
    if (i + BLOCK_SIZE < (size_t)n) v += in[i + BLOCK_SIZE];
    partial[tid] = v;
    __syncthreads();

    // Sequential addressing: the active threads are the first s, so whole
    // warps retire together and neighbouring threads touch neighbouring banks.
    for (unsigned int s = BLOCK_SIZE / 2; s > 0; s >>= 1) {
        if (tid < s) {
            partial[tid] += partial[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        atomicAdd(out, partial[0]);  // one atomic per block
    }
}

// --------------------------------------------------------------------- warp shuffle
// Launch: blockDim = (B, 1, 1) with B a multiple of 32 (up to 1024); gridDim =
// (G, 1, 1) with G about (number of SMs) * (threads an SM holds) / B: the loop
// covers any n, so the grid only needs to fill the GPU. `in` must be 16-byte
// aligned (a fresh CuPy array is; the launcher checks).

__device__ __forceinline__ float warp_sum(float v)
{
    // Five steps: lane i adds lane i + 16, then i + 8, 4, 2, 1; lane 0 ends with the sum.
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

extern "C" __global__ void reduce_warp_shuffle(const float* __restrict__ in, float* out, int n)
{
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t nthreads = (size_t)gridDim.x * blockDim.x;
    const size_t n4 = (size_t)n / 4;  // whole float4s
    const float4* in4 = reinterpret_cast<const float4*>(in);

    // 1. Grid-stride loop, four independent 16-byte loads per iteration, so
    //    each thread keeps 64 bytes in flight. Neighbouring threads read
    //    neighbouring float4s: coalesced.
    float sum = 0.0f;
    size_t k = tid;
    for (; k + 3 * nthreads < n4; k += 4 * nthreads) {
        const float4 a = in4[k];
        const float4 b = in4[k + nthreads];
        const float4 c = in4[k + 2 * nthreads];
        const float4 d = in4[k + 3 * nthreads];
        sum += ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w))
             + ((c.x + c.y) + (c.z + c.w)) + ((d.x + d.y) + (d.z + d.w));
    }
    for (; k < n4; k += nthreads) {
        const float4 a = in4[k];
        sum += (a.x + a.y) + (a.z + a.w);
    }
    for (size_t r = 4 * n4 + tid; r < (size_t)n; r += nthreads) {
        sum += in[r];  // the last n % 4 floats
    }

    // 2. Within each warp, through registers.
    sum = warp_sum(sum);

    // 3. Across the block's warps: one float per warp in shared memory.
    __shared__ float warp_sums[32];
    const unsigned int lane = threadIdx.x % 32;
    const unsigned int warp = threadIdx.x / 32;
    if (lane == 0) {
        warp_sums[warp] = sum;
    }
    __syncthreads();
    if (warp == 0) {
        const unsigned int warps = (blockDim.x + 31) / 32;
        sum = lane < warps ? warp_sums[lane] : 0.0f;
        sum = warp_sum(sum);
        if (lane == 0) {
            atomicAdd(out, sum);  // one atomic per block
        }
    }
}
