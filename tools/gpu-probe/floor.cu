// The floor of a chunk step: a chain of N dependent kernels that do (almost)
// nothing, launched one by one (host-timed, synchronised) and as a replayed
// CUDA graph, with and without programmatic dependent launch. The ratio of
// the two is the most a captured step can gain over an eager one.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <chrono>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

__global__ void empty_k(float* p, int n) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
// reads n floats, writes n floats (a tiny elementwise op)
__global__ void tiny_k(float* p, int n) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i + n] = p[i] * 1.0001f + 1.0f;
}

static void launch(void (*k)(float*, int), int blocks, float* p, int n, cudaStream_t s, bool pdl) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks); cfg.blockDim = dim3(256); cfg.stream = s;
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = a; cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, k, p, n));
}

static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size()/2]; }

int main() {
    float* p; CK(cudaMalloc(&p, 1 << 24));
    CK(cudaMemset(p, 0, 1 << 24));
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct K { const char* name; void (*k)(float*, int); int blocks; int n; };
    K ks[] = {{"empty 1 block", empty_k, 1, 0}, {"empty 132 blocks", empty_k, 132, 0},
              {"tiny 8 blocks (2k floats)", tiny_k, 8, 2048}, {"tiny 128 blocks (32k floats)", tiny_k, 128, 32768}};
    for (int N : {60, 110}) for (auto& k : ks) for (int pdl = 0; pdl < 2; ++pdl) {
        auto step = [&] { for (int i = 0; i < N; ++i) launch(k.k, k.blocks, p, k.n, s, pdl); };
        for (int w = 0; w < 20; ++w) step();
        CK(cudaStreamSynchronize(s));
        std::vector<double> te;
        for (int r = 0; r < 200; ++r) {
            auto t = std::chrono::steady_clock::now(); step(); CK(cudaStreamSynchronize(s));
            te.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
        }
        cudaGraph_t g; cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        step();
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        for (int w = 0; w < 20; ++w) CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        std::vector<double> tg;
        for (int r = 0; r < 200; ++r) {
            auto t = std::chrono::steady_clock::now(); CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
            tg.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
        }
        double e = median(te), c = median(tg);
        printf("N=%3d %-30s PDL %d: eager %7.1f us (%.2f us/kernel), graph %7.1f us (%.2f us/kernel), %.2fx\n",
               N, k.name, pdl, e * 1e6, e * 1e6 / N, c * 1e6, c * 1e6 / N, e / c);
        CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
    }
    return 0;
}
