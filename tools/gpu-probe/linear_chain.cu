// In-graph time of the shipped model's 60 skinny Linears of a chunk step (6
// conformer blocks x 10, each with its own weights), PDL on, captured in a
// CUDA graph and replayed; the median of 250 replays, per Linear.
//
// usage: linear_chain [RULE [ROWS]]
//   RULE: warps per column: `old` (the crate's: 8 for k >= 512, else 4),
//         `mix2` (4 / 2), `mix3` (8 / 2) or a number (1, 2, 4)
//   ROWS: rows per Linear (a pulse's frames; 8 for the shipped model)
// env SHARED_W=1: every block reuses the first block's weights (L2-resident)
// env PERSIST=MiB: a persisting-L2 window over the weights
//
// Built by run.sh against the crate's own linear.cu; -DKFILE='"variant.cu"'
// times a variant of it instead.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include "common.cuh"
#ifndef KFILE
#define KFILE "linear.cu"
#endif
#ifndef KNAME
#define KNAME "crate"
#endif
#include KFILE
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

struct L { int k, n, norm, act, res, glu; float alpha; };
static const L BLOCK[10] = {
  {256, 1024, 1, 8, 0, 0, 1.f}, {1024, 256, 0, -1, 1, 0, .5f},   // ff1
  {256, 256, 1, -1, 0, 0, 1.f}, {256, 256, 1, -1, 0, 0, 1.f}, {256, 256, 1, -1, 0, 0, 1.f}, // q k v
  {256, 256, 0, -1, 1, 0, 1.f},                                   // out
  {256, 512, 1, -1, 0, 1, 1.f}, {256, 256, 0, -1, 1, 0, 1.f},     // pw1 glu, pw2
  {256, 1024, 1, 8, 0, 0, 1.f}, {1024, 256, 0, -1, 1, 0, .5f}};  // ff2

int wpc_for(const char* rule, int k) {
  if (!strcmp(rule, "old")) return k >= 512 ? 8 : 4;
  if (!strcmp(rule, "mix2")) return k >= 512 ? 4 : 2;
  if (!strcmp(rule, "mix3")) return k >= 512 ? 8 : 2;
  return atoi(rule);
}

int main(int argc, char** argv) {
  const char* rule = argc > 1 ? argv[1] : "old";
  const int m = argc > 2 ? atoi(argv[2]) : 8;
  std::vector<float*> ws;
  float *x, *y, *g, *b, *bias;
  CK(cudaMalloc(&x, 16 << 20)); CK(cudaMalloc(&y, 16 << 20));
  CK(cudaMalloc(&g, 4096 * 4)); CK(cudaMalloc(&b, 4096 * 4)); CK(cudaMalloc(&bias, 4096 * 4));
  std::vector<float> h(1 << 20);
  for (size_t i = 0; i < h.size(); ++i) h[i] = ((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  CK(cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(y, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(g, h.data(), 4096 * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b, h.data(), 4096 * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bias, h.data(), 4096 * 4, cudaMemcpyHostToDevice));
  size_t total = 0;
  for (int i = 0; i < 60; ++i) total += (size_t)BLOCK[i % 10].k * BLOCK[i % 10].n;
  float* wall; CK(cudaMalloc(&wall, total * 4));
  {
    std::vector<float> big(total);
    for (size_t i = 0; i < total; ++i) big[i] = h[i % h.size()];
    CK(cudaMemcpy(wall, big.data(), total * 4, cudaMemcpyHostToDevice));
  }
  size_t at = 0;
  for (int i = 0; i < 60; ++i) { ws.push_back(wall + at); at += (size_t)BLOCK[i % 10].k * BLOCK[i % 10].n; }
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  if (getenv("PERSIST")) {
    size_t want = (size_t)atoll(getenv("PERSIST")) << 20;
    int maxp = 0, maxw = 0; cudaDeviceGetAttribute(&maxp, cudaDevAttrMaxPersistingL2CacheSize, 0);
    cudaDeviceGetAttribute(&maxw, cudaDevAttrMaxAccessPolicyWindowSize, 0);
    CK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, std::min(want, (size_t)maxp)));
    cudaStreamAttrValue v = {};
    v.accessPolicyWindow.base_ptr = wall;
    v.accessPolicyWindow.num_bytes = std::min(total * 4, (size_t)maxw);
    v.accessPolicyWindow.hitRatio = std::min(1.0f, (float)std::min(want, (size_t)maxp) / (float)(total * 4));
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
    printf("persisting L2: max %d MiB, window max %d MiB, weights %.1f MiB, hit ratio %.2f\n", maxp >> 20, maxw >> 20, total * 4 / 1048576.0, v.accessPolicyWindow.hitRatio);
  }
  auto step = [&] {
    for (int i = 0; i < 60; ++i) {
      const L& l = BLOCK[i % 10];
      int wpc = wpc_for(rule, l.k), cols = 8 / wpc;
      int blocks = l.glu ? (l.n / 2 + cols / 2 - 1) / (cols / 2) : (l.n + cols - 1) / cols;
      float* xin = (i & 1) ? y : x; float* out = (i & 1) ? x : y;
      cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(blocks, (m + 15) / 16); cfg.blockDim = dim3(256); cfg.stream = s;
      cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a[0].val.programmaticStreamSerializationAllowed = 1; cfg.attrs = a; cfg.numAttrs = 1;
      int hb = 1; float eps = 1e-5f;
      void (*f)(const float*, const float*, const float*, float*, int, int, int, int, int, int, float, const float*, int, int, const float*, const float*, float, int) =
        m <= 1 ? skinny_linear_r1_f32 : m <= 2 ? skinny_linear_r2_f32 : m <= 4 ? skinny_linear_r4_f32 : m <= 8 ? skinny_linear_r8_f32 : skinny_linear_r16_f32;
      CK(cudaLaunchKernelEx(&cfg, f, (const float*)xin, (const float*)ws[getenv("SHARED_W") ? i % 10 : i], (const float*)bias, out, m, l.n, l.k, l.act, hb, wpc, l.alpha,
                            (const float*)xin, l.res, l.glu, (const float*)g, (const float*)b, eps, l.norm));
    }
  };
  for (int w = 0; w < 5; ++w) step();
  CK(cudaStreamSynchronize(s)); CK(cudaGetLastError());
  cudaGraph_t gr; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)); step(); CK(cudaStreamEndCapture(s, &gr));
  CK(cudaGraphInstantiate(&ge, gr, 0));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int r = 0; r < 300; ++r) {
    CK(cudaEventRecord(e0, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
    float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (r >= 50) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  printf("%-8s rule %-4s m %2d: 60 linears %7.1f us in graph (%.2f us each), p10 %.1f p90 %.1f\n", KNAME, rule, m, t[t.size()/2] * 1e3, t[t.size()/2] * 1e3 / 60, t[t.size()/10]*1e3, t[t.size()*9/10]*1e3);
  return 0;
}
