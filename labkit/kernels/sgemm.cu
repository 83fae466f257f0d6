// sgemm.cu: C = A @ B in float32, row-major, A: M x K, B: K x N, C: M x N.
//
// Three steps of the classic progression (Simon Boehm, "How to optimize a
// CUDA matmul kernel for cuBLAS-like performance", 2022):
//
//   sgemm_naive   one thread per element of C, every operand from global
//                 memory. Neighbouring threads take neighbouring columns, so
//                 B and C accesses coalesce and the A value is a broadcast;
//                 but each float of A and B is fetched from memory (or L2)
//                 again by every thread that needs it: ~2 loads per FMA.
//   sgemm_shared  a block stages TILE_SIZE x TILE_SIZE tiles of A and B in
//                 shared memory; each value loaded from global memory is then
//                 used TILE_SIZE times. Still one output per thread, so the
//                 inner loop is 2 shared-memory loads per FMA.
//   sgemm_tiled   shared-memory tiles (BM x BK of A, BK x BN of B) *and*
//                 register blocking: each thread computes a TM x TN micro-tile
//                 of C, so one column of A (TM values) and one row of B (TN
//                 values) loaded into registers feed TM * TN FMAs. Global loads
//                 are 16-byte float4s. This is Boehm's kernel 6 ("Vectorized
//                 Mem Access": 2D blocktiling with float4 loads) with the thread layout of his warptiling
//                 kernel: a warp's 32 threads take a 4 x 8 patch of micro-tiles,
//                 so their shared-memory reads are conflict-free float4s.
//
// FLOP per call: 2 * M * N * K.

// --------------------------------------------------------------------- naive
// Launch: blockDim = (32, 8, 1) (any 2-D block), gridDim = (ceil(N / 32), ceil(M / 8), 1).
// Any M, N, K.

extern "C" __global__ void sgemm_naive(const float* __restrict__ A, const float* __restrict__ B,
                                       float* __restrict__ C, int M, int N, int K)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
        }
        C[(size_t)row * N + col] = acc;
    }
}

// --------------------------------------------------------------------- shared
// Launch: blockDim = (TILE_SIZE, TILE_SIZE, 1), TILE_SIZE <= 32,
//         gridDim = (ceil(N / TILE_SIZE), ceil(M / TILE_SIZE), 1). Any M, N, K.

#ifndef TILE_SIZE
#define TILE_SIZE 32
#endif

extern "C" __global__ void sgemm_shared(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K)
{
    __shared__ float As[TILE_SIZE][TILE_SIZE];
    __shared__ float Bs[TILE_SIZE][TILE_SIZE];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE_SIZE + ty;
    const int col = blockIdx.x * TILE_SIZE + tx;
    float acc = 0.0f;

    for (int t = 0; t < K; t += TILE_SIZE) {
        // Each thread loads one element of each tile (zero outside the matrices).
        As[ty][tx] = (row < M && t + tx < K) ? A[(size_t)row * K + t + tx] : 0.0f;
        Bs[ty][tx] = (t + ty < K && col < N) ? B[(size_t)(t + ty) * N + col] : 0.0f;
        __syncthreads();  // the tiles are complete
#pragma unroll
        for (int k = 0; k < TILE_SIZE; ++k) {
            acc += As[ty][k] * Bs[k][tx];  // As: broadcast within a warp; Bs: one row, no conflict
        }
        __syncthreads();  // nobody still reads the tiles we overwrite next
    }
    if (row < M && col < N) {
        C[(size_t)row * N + col] = acc;
    }
}

// --------------------------------------------------------------------- tiled
// Launch: blockDim = ((BM / TM) * (BN / TN), 1, 1), gridDim = (N / BN, M / BM, 1).
// Requires M % BM == 0, N % BN == 0, K % BK == 0 (the launcher checks; no edge
// handling keeps the inner loop free of branches) and 16-byte aligned A, B, C.
// The static_asserts below list the constraints on the tile sizes; Kernel
// Tuner's restrictions in labkit/kernels/tuning.py repeat them.

#ifndef BM
#define BM 128  // rows of C per block
#endif
#ifndef BN
#define BN 128  // columns of C per block
#endif
#ifndef BK
#define BK 8    // depth of the shared-memory tiles
#endif
#ifndef TM
#define TM 8    // rows of C per thread
#endif
#ifndef TN
#define TN 8    // columns of C per thread
#endif

#define SGEMM_THREADS ((BM / TM) * (BN / TN))

extern "C" __global__ void __launch_bounds__(SGEMM_THREADS)
sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
            int M, int N, int K)
{
    static_assert(BM % TM == 0 && BN % TN == 0, "TM must divide BM and TN must divide BN");
    static_assert(SGEMM_THREADS >= 32 && SGEMM_THREADS <= 1024, "1 to 32 warps per block");
    static_assert(BK % 4 == 0 && BN % 4 == 0 && TN % 4 == 0 && TM % 4 == 0,
                  "float4 accesses need BK, BN, TM and TN to be multiples of 4");
    static_assert(BN % (8 * TN) == 0 && BM % (4 * TM) == 0,
                  "each warp covers 4 x 8 threads' tiles: BN / TN must be a multiple of 8, BM / TM of 4");
    static_assert((4 * SGEMM_THREADS) % BK == 0 && (BM * BK) % (4 * SGEMM_THREADS) == 0,
                  "the block loads the BM x BK tile of A in whole float4 rows");
    static_assert((4 * SGEMM_THREADS) % BN == 0 && (BK * BN) % (4 * SGEMM_THREADS) == 0,
                  "the block loads the BK x BN tile of B in whole float4 rows");

    // A's tile is stored transposed (As[k][m]) so the inner loop reads
    // consecutive floats of one column; B's tile is stored as is (Bs[k][n]).
    // 16-byte aligned: the inner loop reads them as float4.
    __shared__ __align__(16) float As[BK * BM];
    __shared__ __align__(16) float Bs[BK * BN];

    // Which TM x TN micro-tile of the block's C tile this thread computes.
    // The 32 threads of a warp take a 4 x 8 patch of micro-tiles (not 1 x 32),
    // so a warp reads 4 rows' worth of As and 8 columns' worth of Bs per
    // step: fewer shared-memory bytes for the same FMAs.
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int warpsAcross = (BN / TN) / 8;
    const int threadRow = (warp / warpsAcross) * 4 + lane / 8;
    const int threadCol = (warp % warpsAcross) * 8 + lane % 8;
    // A thread's TM rows are TM / 4 groups of 4 consecutive rows, BM / (TM / 4)
    // apart (its TN columns likewise), so the 8 threads reading Bs together
    // read 8 neighbouring float4s: 128 contiguous bytes, no bank conflict.
    const int rowGroupStride = BM / (TM / 4);
    const int colGroupStride = BN / (TN / 4);

    A += (size_t)blockIdx.y * BM * K;                          // first row of this block's A strip
    B += (size_t)blockIdx.x * BN;                              // first column of its B strip
    C += (size_t)blockIdx.y * BM * N + (size_t)blockIdx.x * BN;

    // Which float4 of each tile this thread loads, and how far the block
    // steps between its loads.
    const int innerRowA = threadIdx.x / (BK / 4);
    const int innerColA = threadIdx.x % (BK / 4);
    const int rowStrideA = (4 * SGEMM_THREADS) / BK;
    const int innerRowB = threadIdx.x / (BN / 4);
    const int innerColB = threadIdx.x % (BN / 4);
    const int rowStrideB = (4 * SGEMM_THREADS) / BN;

    float acc[TM * TN];
#pragma unroll
    for (int i = 0; i < TM * TN; ++i) acc[i] = 0.0f;
    float regM[TM];
    float regN[TN];

    for (int bk = 0; bk < K; bk += BK) {
        // 1. Global -> shared, 16 bytes per load, coalesced along rows.
#pragma unroll
        for (int off = 0; off < BM; off += rowStrideA) {
            const float4 t = *reinterpret_cast<const float4*>(
                &A[(size_t)(innerRowA + off) * K + innerColA * 4]);
            As[(innerColA * 4 + 0) * BM + innerRowA + off] = t.x;
            As[(innerColA * 4 + 1) * BM + innerRowA + off] = t.y;
            As[(innerColA * 4 + 2) * BM + innerRowA + off] = t.z;
            As[(innerColA * 4 + 3) * BM + innerRowA + off] = t.w;
        }
#pragma unroll
        for (int off = 0; off < BK; off += rowStrideB) {
            *reinterpret_cast<float4*>(&Bs[(innerRowB + off) * BN + innerColB * 4]) =
                *reinterpret_cast<const float4*>(&B[(size_t)(innerRowB + off) * N + innerColB * 4]);
        }
        __syncthreads();  // both tiles complete

        A += BK;              // next tiles: BK columns right in A ...
        B += (size_t)BK * N;  // ... and BK rows down in B

        // 2. The outer product of a column of As and a row of Bs, BK times.
        //    TM / 4 + TN / 4 float4 shared loads feed TM * TN fused multiply-adds.
#pragma unroll
        for (int d = 0; d < BK; ++d) {
#pragma unroll
            for (int g = 0; g < TM / 4; ++g) {
                const float4 a = *reinterpret_cast<const float4*>(
                    &As[d * BM + g * rowGroupStride + threadRow * 4]);
                regM[4 * g + 0] = a.x; regM[4 * g + 1] = a.y; regM[4 * g + 2] = a.z; regM[4 * g + 3] = a.w;
            }
#pragma unroll
            for (int g = 0; g < TN / 4; ++g) {
                const float4 b = *reinterpret_cast<const float4*>(
                    &Bs[d * BN + g * colGroupStride + threadCol * 4]);
                regN[4 * g + 0] = b.x; regN[4 * g + 1] = b.y; regN[4 * g + 2] = b.z; regN[4 * g + 3] = b.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i * TN + j] += regM[i] * regN[j];
                }
            }
        }
        __syncthreads();  // nobody still reads the tiles we overwrite next
    }

    // 3. Registers -> global, 16 bytes per store; acc[i][j] belongs to row
    //    (i / 4) * rowGroupStride + threadRow * 4 + i % 4 and column
    //    (j / 4) * colGroupStride + threadCol * 4 + j % 4 of the block's tile.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = (i / 4) * rowGroupStride + threadRow * 4 + i % 4;
#pragma unroll
        for (int g = 0; g < TN / 4; ++g) {
            float4 c;
            c.x = acc[i * TN + 4 * g + 0];
            c.y = acc[i * TN + 4 * g + 1];
            c.z = acc[i * TN + 4 * g + 2];
            c.w = acc[i * TN + 4 * g + 3];
            *reinterpret_cast<float4*>(&C[(size_t)row * N + g * colGroupStride + threadCol * 4]) = c;
        }
    }
}
