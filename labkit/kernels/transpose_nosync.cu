// transpose_nosync.cu: BROKEN ON PURPOSE. Do not use it for anything but the exercise.
//
// ############################################################################
// #  This is transpose_tiled from transpose.cu with the __syncthreads()     #
// #  removed. It compiles, it runs, and it is WRONG: a thread may read its   #
// #  tile element before the thread that loads it has written it.            #
// ############################################################################
//
// The exercise (notebook 07): run it, compare with the input's transpose,
// and explain why the wrong elements differ from run to run. Every read of an
// element that another thread wrote is a race, within a warp too: since Volta's
// independent thread scheduling the threads of a warp have no lockstep
// guarantee without __syncwarp() (CUDA Programming Guide, "Independent Thread
// Scheduling"). With TILE_DIM 32 and BLOCK_ROWS 8, 7 of every 8 reads are of
// elements another warp wrote. A race like this gives no error message: only checking
// the result against a reference finds it (and `compute-sanitizer --tool
// racecheck` on a machine that has one).
//
// Launch exactly as transpose_tiled: blockDim = (TILE_DIM, BLOCK_ROWS, 1),
// gridDim = (ceil(cols / TILE_DIM), ceil(rows / TILE_DIM), 1).

#ifndef TILE_DIM
#define TILE_DIM 32
#endif
#ifndef BLOCK_ROWS
#define BLOCK_ROWS 8
#endif

extern "C" __global__ void transpose_tiled_nosync(const float* __restrict__ in,
                                                  float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[TILE_DIM][TILE_DIM];

    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (x < cols && y + j < rows) {
            tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * cols + x];
        }
    }

    // BUG (deliberate): the __syncthreads() that belongs here is missing.

    x = blockIdx.y * TILE_DIM + threadIdx.x;
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS) {
        if (x < rows && y + j < cols) {
            out[(size_t)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
        }
    }
}
