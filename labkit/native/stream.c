/*
 * A STREAM-style copy and triad in C: the reference that `labkit bench bandwidth`
 * holds labkit's torch probes against. labkit compiles it at run time with
 *   cc -O3 -march=native -fopenmp stream.c
 * (falling back to fewer flags) and runs it as a subprocess.
 *
 * Usage: stream N_ELEMENTS
 * It allocates and fills three arrays of N float64, prints one JSON line
 *   {"ready": true, "n_elements": N, "threads": T, "openmp": true}
 * then reads commands from stdin, one per line, and answers each with one JSON line:
 *   copy K     -> {"kernel": "copy", "ms": [K times]}      c[i] = a[i]
 *   triad K    -> {"kernel": "triad", "ms": [...]}         b[i] = a[i] + 3 * c[i]
 *   memcpy K   -> {"kernel": "memcpy", "ms": [...]}        memcpy, one chunk per thread
 *   quit       -> {"valid": true|false}, then exit
 * Taking commands lets labkit alternate between its own probes and these
 * loops a few calls at a time, so a busy machine slows all of them alike.
 *
 * Counting follows STREAM: copy moves 2 arrays, triad 3, of N float64 each;
 * write-allocate traffic is not counted. The loops are plain C so that the
 * compiler, not a library, decides how they run (vectorized, OpenMP threads).
 *
 * memcpy is reported for information: for large copies the C library uses
 * non-temporal stores, which skip the read of each destination line that
 * ordinary stores cause (write-allocate), so it shows what that read costs.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static double *a, *b, *c;
static ptrdiff_t n;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static double *allocate(size_t count) {
    void *p = NULL;
    return posix_memalign(&p, 64, count * sizeof(double)) == 0 ? (double *)p : NULL;
}

static void copy(void) {
    ptrdiff_t i;
#pragma omp parallel for schedule(static)
    for (i = 0; i < n; i++) c[i] = a[i];
}

static void triad(void) {
    const double s = 3.0;
    ptrdiff_t i;
#pragma omp parallel for schedule(static)
    for (i = 0; i < n; i++) b[i] = a[i] + s * c[i]; /* c == a after copy: b == 4 every time */
}

static void chunked_memcpy(void) {
#pragma omp parallel
    {
        ptrdiff_t lo = 0, hi = n;
#ifdef _OPENMP
        ptrdiff_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        lo = n * t / nt;
        hi = n * (t + 1) / nt;
#endif
        memcpy(c + lo, a + lo, (size_t)(hi - lo) * sizeof(double));
    }
}

int main(int argc, char **argv) {
    if (argc != 2 || atoll(argv[1]) < 1) {
        fprintf(stderr, "usage: %s N_ELEMENTS (N >= 1)\n", argv[0]);
        return 2;
    }
    n = (ptrdiff_t)atoll(argv[1]);
    a = allocate((size_t)n);
    b = allocate((size_t)n);
    c = allocate((size_t)n);
    if (!a || !b || !c) {
        fprintf(stderr, "out of memory for 3 arrays of %lld doubles\n", (long long)n);
        return 3;
    }
    ptrdiff_t i;
    /* First touch in parallel, with the kernels' schedule, so each thread's
       pages sit next to the core that uses them (NUMA). */
#pragma omp parallel for schedule(static)
    for (i = 0; i < n; i++) {
        a[i] = 1.0;
        b[i] = 2.0;
        c[i] = 1.0;
    }
    int threads = 1, openmp = 0;
#ifdef _OPENMP
    threads = omp_get_max_threads();
    openmp = 1;
#endif
    printf("{\"ready\": true, \"n_elements\": %lld, \"threads\": %d, \"openmp\": %s}\n",
           (long long)n, threads, openmp ? "true" : "false");
    fflush(stdout);

    char line[128], name[32];
    while (fgets(line, sizeof line, stdin)) {
        int reps = 0;
        if (sscanf(line, "%31s %d", name, &reps) < 1) continue;
        if (strcmp(name, "quit") == 0) break;
        void (*kernel)(void) = NULL;
        if (strcmp(name, "copy") == 0) kernel = copy;
        if (strcmp(name, "triad") == 0) kernel = triad;
        if (strcmp(name, "memcpy") == 0) kernel = chunked_memcpy;
        if (!kernel || reps < 1 || reps > 100000) {
            printf("{\"error\": \"unknown command\"}\n");
            fflush(stdout);
            continue;
        }
        printf("{\"kernel\": \"%s\", \"ms\": [", name);
        for (int r = 0; r < reps; r++) {
            double t0 = now_ms();
            kernel();
            printf("%s%.6f", r ? ", " : "", now_ms() - t0);
        }
        printf("]}\n");
        fflush(stdout);
    }
    /* Check the results, as STREAM does: wrong values would make the timings meaningless. */
    long long wrong = 0;
#pragma omp parallel for schedule(static) reduction(+ : wrong)
    for (i = 0; i < n; i++) wrong += (a[i] != 1.0) + (c[i] != 1.0) + (b[i] != 2.0 && b[i] != 4.0);
    printf("{\"valid\": %s}\n", wrong ? "false" : "true");
    fflush(stdout);
    free(a);
    free(b);
    free(c);
    return wrong ? 4 : 0;
}
