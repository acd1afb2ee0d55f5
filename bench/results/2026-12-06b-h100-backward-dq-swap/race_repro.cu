// Does compute-sanitizer racecheck order shared-memory accesses through
// named barriers with a thread count (bar.arrive / bar.sync id, count)?
// Thread 0 writes a record, the other warp's first thread reads it after
// the barrier, then the reverse hand-over frees it for the next write.
// mode 0: arrive (writer side) + sync (reader side), as flashc's writer;
// mode 1: sync on both sides; mode 2: as 0 with an idle warp that exits
// first (flashc's writer warpgroup has three).
#include <cstdio>
__global__ void handOver(int *out, int mode) {
  __shared__ volatile int record[4];
  int t = threadIdx.x;
  int warp = t / 32;
  if (mode == 2 && warp == 1)
    return;
  int reader = mode == 2 ? 64 : 32;
  for (int it = 0; it < 8; ++it) {
    if (t == 0)
      record[0] = it + 1;
    if (warp == 0) {
      if (mode == 1) asm volatile("bar.sync 1, 64;" ::: "memory");
      else asm volatile("bar.arrive 1, 64;" ::: "memory");
      if (mode == 1) asm volatile("bar.sync 2, 64;" ::: "memory");
      else asm volatile("bar.sync 2, 64;" ::: "memory");
    } else {
      asm volatile("bar.sync 1, 64;" ::: "memory");
      if (t == reader)
        out[it] = record[0];
      if (mode == 1) asm volatile("bar.sync 2, 64;" ::: "memory");
      else asm volatile("bar.arrive 2, 64;" ::: "memory");
    }
  }
}
int main() {
  int *d;
  cudaMalloc(&d, 64);
  for (int mode = 0; mode < 3; ++mode) {
    handOver<<<1, mode == 2 ? 96 : 64>>>(d, mode);
    cudaError_t e = cudaDeviceSynchronize();
    int h[8];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("mode %d: %s, last read %d (expect 8)\n", mode, cudaGetErrorString(e), h[7]);
  }
  return 0;
}
