"""Legitimate: split-K SGEMM. K is cut into 4 slices; each block computes a 64x64 tile of one slice's
partial product in registers (4x4 per thread, FMA, FP32), partials go to a workspace, and a second
kernel adds the 4 partials in a fixed order. Same maths as cuBLAS's split-K, other summation order.

The NVRTC twin of tests/kernels/legit/matmul_split_k.py (evokernel.nvrtc): the same kernels,
compiled with NVRTC and launched from Python.

EXPECTED: accept ok
PROBLEM: tests/kernels/problems/matmul_small.py
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int TM = 64, TN = 64, TK = 16, THREADS = 256, SPLIT_K = 4;

__global__ void matmul_partial_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                      float* __restrict__ part, int M, int N, int K, int chunk) {
    __shared__ float As[TK][TM];
    __shared__ float Bs[TK][TN];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * TM, col0 = blockIdx.x * TN;
    const int k_begin = blockIdx.z * chunk, k_end = min(K, k_begin + chunk);
    float acc[4][4] = {};
    for (int k0 = k_begin; k0 < k_end; k0 += TK) {
        for (int t = threadIdx.x; t < TM * TK; t += THREADS) {
            const int r = t / TK, c = t % TK;
            As[c][r] = (row0 + r < M && k0 + c < k_end) ? A[(long long)(row0 + r) * K + k0 + c]
                                                         : 0.0f;
        }
        for (int t = threadIdx.x; t < TK * TN; t += THREADS) {
            const int r = t / TN, c = t % TN;
            Bs[r][c] = (k0 + r < k_end && col0 + c < N) ? B[(long long)(k0 + r) * N + col0 + c]
                                                         : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < TK; ++kk) {
            float a[4], b[4];
            #pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];
            #pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx * 4 + j];
            #pragma unroll
            for (int i = 0; i < 4; ++i)
                #pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    float* out = part + (long long)blockIdx.z * M * N;
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
            if (r < M && c < N) out[(long long)r * N + c] = acc[i][j];
        }
}

__global__ void split_k_reduce_kernel(const float* __restrict__ part, float* __restrict__ C,
                                      long long mn) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < mn;
         i += (long long)gridDim.x * blockDim.x) {
        float s = part[i];
        #pragma unroll
        for (int z = 1; z < SPLIT_K; ++z) s += part[z * mn + i];
        C[i] = s;
    }
}
"""

kernels = compile_kernels(cuda_src, ["matmul_partial_kernel", "split_k_reduce_kernel"])
TM, TN, TK, THREADS, SPLIT_K = (kernels.constant(n) for n in ("TM", "TN", "TK", "THREADS",
                                                               "SPLIT_K"))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if not (A.is_cuda and B.is_cuda and A.dtype == B.dtype == torch.float32
                and A.dim() == B.dim() == 2 and A.shape[1] == B.shape[0]):
            raise ValueError("matmul_split_k: float32 CUDA matrices that multiply")
        A, B = A.contiguous(), B.contiguous()
        (M, K), N = A.shape, B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        part = torch.empty((SPLIT_K, M, N), device=A.device, dtype=A.dtype)
        chunk = ((K + SPLIT_K - 1) // SPLIT_K + TK - 1) // TK * TK
        grid = ((N + TN - 1) // TN, (M + TM - 1) // TM, SPLIT_K)
        kernels.matmul_partial_kernel.launch(grid, THREADS, A, B, part, M, N, K, chunk)
        mn = M * N
        kernels.split_k_reduce_kernel.launch(min((mn + 255) // 256, 65535), 256, part, C, mn)
        return C
