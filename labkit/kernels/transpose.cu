// transpose.cu: out = in^T for a rows x cols float32 matrix (row-major), three ways.
//
// After Mark Harris, "An Efficient Matrix Transpose in CUDA C/C++", NVIDIA
// Developer Blog (2013): each thread block handles one TILE_DIM x TILE_DIM
// tile with TILE_DIM x BLOCK_ROWS threads, so every thread moves
// TILE_DIM / BLOCK_ROWS elements (the loop over j below).
//
//   transpose_naive   reads rows (coalesced) but writes columns: neighbouring
//                     threads write floats `rows` apart, one sector each.
//   transpose_tiled   stages the tile in shared memory, so both the global
//                     read and the global write are row-wise (coalesced); the
//                     transposition happens in shared memory instead.
//   transpose_padded  the same with one extra column of padding, which moves
//                     each row of the tile to a different shared-memory bank.
//                     Without it, reading a tile column (tile[threadIdx.x][..])
//                     hits one bank 32 times: a 32-way bank conflict.
//
// Launch: blockDim = (TILE_DIM, BLOCK_ROWS, 1),
//         gridDim  = (ceil(cols / TILE_DIM), ceil(rows / TILE_DIM), 1).
// TILE_DIM must be a multiple of BLOCK_ROWS and TILE_DIM * BLOCK_ROWS <= 1024.
// Any rows and cols work: threads outside the matrix do nothing.
// Bytes moved: rows * cols floats read + the same written.

#ifndef TILE_DIM
#define TILE_DIM 32
#endif
#ifndef BLOCK_ROWS
#define BLOCK_ROWS 8
#endif

extern "C" __global__ void transpose_naive(const float* __restrict__ in, float* __restrict__ out,
                                           int rows, int cols)
{
    const int x = blockIdx.x * TILE_DIM + threadIdx.x;  // column of `in`
    const int y = blockIdx.y * TILE_DIM + threadIdx.y;  // row of `in`
    if (x >= cols) return;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (y + j < rows) {
            // read: neighbouring threads, neighbouring floats (coalesced)
            // write: neighbouring threads, floats `rows` apart (strided)
            out[(size_t)x * rows + (y + j)] = in[(size_t)(y + j) * cols + x];
        }
    }
}

extern "C" __global__ void transpose_tiled(const float* __restrict__ in, float* __restrict__ out,
                                           int rows, int cols)
{
    __shared__ float tile[TILE_DIM][TILE_DIM];

    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (x < cols && y + j < rows) {
            tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * cols + x];  // coalesced
        }
    }

    // Every thread of the block must have written its part of the tile
    // before any thread reads another thread's part.
    __syncthreads();

    x = blockIdx.y * TILE_DIM + threadIdx.x;  // column of `out` (a row of `in`)
    y = blockIdx.x * TILE_DIM + threadIdx.y;  // row of `out` (a column of `in`)
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (x < rows && y + j < cols) {
            // coalesced write; the read walks down a tile column: threadIdx.x
            // steps TILE_DIM floats, so with TILE_DIM = 32 every thread of a
            // warp hits the same bank (a 32-way conflict)
            out[(size_t)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
        }
    }
}

extern "C" __global__ void transpose_padded(const float* __restrict__ in, float* __restrict__ out,
                                            int rows, int cols)
{
    // TILE_DIM + 1 columns: element [i][k] sits in bank (i * (TILE_DIM + 1) + k) % 32,
    // so with TILE_DIM = 32 (or 64) a warp's 32 reads of a column fall in 32 different
    // banks. Not with the tuner's TILE_DIM = 16 and BLOCK_ROWS >= 2: a warp then spans two
    // rows of threads (threadIdx.y and threadIdx.y + 1), and one bank gets two of its reads
    // (2-way); with BLOCK_ROWS = 1 the 16-thread block reads 16 different banks.
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];

    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (x < cols && y + j < rows) {
            tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * cols + x];
        }
    }

    __syncthreads();

    x = blockIdx.y * TILE_DIM + threadIdx.x;
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (x < rows && y + j < cols) {
            out[(size_t)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];  // conflict-free
        }
    }
}
