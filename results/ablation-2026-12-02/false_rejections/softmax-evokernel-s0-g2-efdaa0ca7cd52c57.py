"""Softmax (dim=1), NVRTC form: register-resident rows split over a thread-block cluster.

Main path (cols % (4*BLOCK*CLUSTER) == 0, 16-byte aligned): grid = rows*CLUSTER, cluster
(CLUSTER,1,1), each block owns cols/CLUSTER contiguous floats and each thread holds NV float4
(index tid + k*BLOCK) in registers. Per thread: max over its registers, e = exp(x - m_t) kept in
the registers, s_t = sum(e). (m, s) pairs are merged with warp shuffles and a per-warp shared
array, each block writes its pair into every rank's slot array through DSMEM (mapa +
st.shared::cluster), one cluster barrier, and every block merges the CLUSTER pairs in the same
order. Output = e * (exp(m_t - M) / S), written with streaming float4 stores.
Other shapes use a two-sweep online-softmax kernel (one block per row)."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 1024;   // tune: 256 512 1024
constexpr int CLUSTER = 2;    // tune: 2 4 8
constexpr int MAX_V4 = 8192;  // register-tile cap: NV * BLOCK float4 per block (NV <= 8 at 1024 threads)
constexpr int UNROLL = 4;     // fallback kernel only

#define NEG_INF (-__int_as_float(0x7f800000))

// max that propagates NaN like PyTorch
__device__ __forceinline__ float nanmax(float a, float b) {
    return (b > a || isnan(b)) ? b : a;
}

// Merge (m2, s2) into (m, s): s is a sum of exp(x - m).
__device__ __forceinline__ void merge_ms(float& m, float& s, float m2, float s2) {
    const float M = nanmax(m, m2);
    const float ref = (M == NEG_INF) ? 0.0f : M;   // avoid (-inf) - (-inf)
    s = s * expf(m - ref) + s2 * expf(m2 - ref);
    m = M;
}

__device__ __forceinline__ void warp_merge(float& m, float& s) {
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge_ms(m, s, m2, s2);
    }
}

__device__ __forceinline__ float max4(float4 v) {
    return nanmax(nanmax(v.x, v.y), nanmax(v.z, v.w));
}

__device__ __forceinline__ float sumexp4(float4 v, float ref) {
    return (expf(v.x - ref) + expf(v.y - ref)) + (expf(v.z - ref) + expf(v.w - ref));
}

// ---------------- cluster helpers (PTX, sm_90) ----------------
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_release() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// Store v into the shared variable `local` of the cluster block `rank`.
__device__ __forceinline__ void st_remote_f32(float* local, unsigned rank, float v) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(local);
    unsigned ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;\n" :: "r"(ra), "f"(v) : "memory");
}

// ---------------- main path: register-resident row over a cluster ----------------
template <int NV>
__device__ __forceinline__ void softmax_cluster_body(const float* __restrict__ x,
                                                     float* __restrict__ y, long long cols) {
    constexpr int NW = BLOCK / 32;
    __shared__ float wm[NW];
    __shared__ float ws[NW];
    __shared__ float cm[CLUSTER];
    __shared__ float cs[CLUSTER];

    // Phase 1 of the cluster barrier: completes long before the DSMEM write needs it
    // (guarantees every block of the cluster has started).
    cluster_arrive_relaxed();

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const unsigned rank = blockIdx.x % CLUSTER;
    const long long row = blockIdx.x / CLUSTER;
    const long long off = row * cols + (long long)rank * (4LL * NV * BLOCK);
    const float4* xb = reinterpret_cast<const float4*>(x + off) + tid;
    float4* yb = reinterpret_cast<float4*>(y + off) + tid;

    float4 v[NV];
    #pragma unroll
    for (int k = 0; k < NV; ++k) v[k] = __ldcs(xb + k * BLOCK);   // all loads in flight

    float mt = NEG_INF;
    #pragma unroll
    for (int k = 0; k < NV; ++k) mt = nanmax(mt, max4(v[k]));
    const float rt = (mt == NEG_INF) ? 0.0f : mt;
    float st = 0.0f;
    #pragma unroll
    for (int k = 0; k < NV; ++k) {
        v[k].x = expf(v[k].x - rt);
        v[k].y = expf(v[k].y - rt);
        v[k].z = expf(v[k].z - rt);
        v[k].w = expf(v[k].w - rt);
        st += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }

    // block-wide (max, sum)
    float m = mt, s = st;
    warp_merge(m, s);
    if (lane == 0) { wm[warp] = m; ws[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = (lane < NW) ? wm[lane] : NEG_INF;
        s = (lane < NW) ? ws[lane] : 0.0f;
        warp_merge(m, s);   // every lane of warp 0 holds the block's pair
    }

    // all-to-all exchange of the block pairs through DSMEM
    cluster_wait();
    if (warp == 0 && lane < CLUSTER) {
        st_remote_f32(&cm[rank], (unsigned)lane, m);
        st_remote_f32(&cs[rank], (unsigned)lane, s);
    }
    cluster_arrive_release();
    cluster_wait();

    float M = cm[0];
    float S = cs[0];
    #pragma unroll
    for (int r = 1; r < CLUSTER; ++r) merge_ms(M, S, cm[r], cs[r]);
    const float inv = 1.0f / S;
    // e = exp(x - rt); y = e * exp(rt - M) / S. A thread whose values are all -inf has e == 0.
    const float scale = (mt == NEG_INF) ? inv : expf(mt - M) * inv;

    #pragma unroll
    for (int k = 0; k < NV; ++k) {
        float4 o;
        o.x = v[k].x * scale;
        o.y = v[k].y * scale;
        o.z = v[k].z * scale;
        o.w = v[k].w * scale;
        __stcs(yb + k * BLOCK, o);
    }
}

#define DEFINE_CLUSTER_KERNEL(NVV)                                                          \
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(BLOCK, 1)                 \
softmax_cluster_nv##NVV(const float* __restrict__ x, float* __restrict__ y, long long cols) { \
    if (NVV * BLOCK <= MAX_V4) softmax_cluster_body<NVV>(x, y, cols);                       \
}

DEFINE_CLUSTER_KERNEL(1)
DEFINE_CLUSTER_KERNEL(2)
DEFINE_CLUSTER_KERNEL(4)
DEFINE_CLUSTER_KERNEL(8)
DEFINE_CLUSTER_KERNEL(16)
DEFINE_CLUSTER_KERNEL(32)

// ---------------- fallback: one block per row, two float4 sweeps ----------------
__device__ __forceinline__ void block_merge(float& m, float& s, float* shm, float* shs) {
    warp_merge(m, s);
    constexpr int NW = BLOCK / 32;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    if (lane == 0) { shm[warp] = m; shs[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = (lane < NW) ? shm[lane] : NEG_INF;
        s = (lane < NW) ? shs[lane] : 0.0f;
        warp_merge(m, s);
        if (lane == 0) { shm[0] = m; shs[0] = s; }
    }
    __syncthreads();
    m = shm[0];
    s = shs[0];
    __syncthreads();   // shm/shs may be reused right after
}

// y[r][i] = exp(x[r][i] - max_r) / sum_j exp(x[r][j] - max_r). One block per row.
// vec != 0: cols % 4 == 0 and x, y 16-byte aligned (float4 path); otherwise scalar path.
__global__ void __launch_bounds__(BLOCK)
softmax_row_kernel(const float* __restrict__ x, float* __restrict__ y,
                   long long rows, long long cols, int vec) {
    __shared__ float shm[32];
    __shared__ float shs[32];
    constexpr int STEP = BLOCK * UNROLL;
    const int tid = threadIdx.x;

    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        float m = NEG_INF;
        float s = 0.0f;
        if (vec) {
            const long long n4 = cols >> 2;
            const float4* xr4 = reinterpret_cast<const float4*>(x + r * cols);
            float4* yr4 = reinterpret_cast<float4*>(y + r * cols);
            for (long long base = tid; base < n4; base += STEP) {
                float4 v[UNROLL];
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    v[u] = (i < n4) ? __ldg(xr4 + i)
                                    : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
                }
                float cm = NEG_INF;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) cm = nanmax(cm, max4(v[u]));
                const float M = nanmax(m, cm);
                const float ref = (M == NEG_INF) ? 0.0f : M;
                float t = 0.0f;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) t += sumexp4(v[u], ref);
                s = s * expf(m - ref) + t;
                m = M;
            }
            block_merge(m, s, shm, shs);
            const float ref = (m == NEG_INF) ? 0.0f : m;
            const float inv = 1.0f / s;
            const long long nchunk = (n4 + STEP - 1) / STEP;
            for (long long c = nchunk - 1; c >= 0; --c) {
                const long long base = c * STEP + tid;
                float4 v[UNROLL];
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    v[u] = (i < n4) ? __ldcs(xr4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    if (i < n4) {
                        float4 o;
                        o.x = expf(v[u].x - ref) * inv;
                        o.y = expf(v[u].y - ref) * inv;
                        o.z = expf(v[u].z - ref) * inv;
                        o.w = expf(v[u].w - ref) * inv;
                        __stcs(yr4 + i, o);
                    }
                }
            }
        } else {
            const float* xr = x + r * cols;
            float* yr = y + r * cols;
            for (long long base = tid; base < cols; base += STEP) {
                float v[UNROLL];
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    v[u] = (i < cols) ? __ldg(xr + i) : NEG_INF;
                }
                float cm = NEG_INF;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) cm = nanmax(cm, v[u]);
                const float M = nanmax(m, cm);
                const float ref = (M == NEG_INF) ? 0.0f : M;
                float t = 0.0f;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) t += expf(v[u] - ref);
                s = s * expf(m - ref) + t;
                m = M;
            }
            block_merge(m, s, shm, shs);
            const float ref = (m == NEG_INF) ? 0.0f : m;
            const float inv = 1.0f / s;
            const long long nchunk = (cols + STEP - 1) / STEP;
            for (long long c = nchunk - 1; c >= 0; --c) {
                const long long base = c * STEP + tid;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    if (i < cols) __stcs(yr + i, expf(__ldcs(xr + i) - ref) * inv);
                }
            }
        }
    }
}
"""

_CLUSTER_NV = (1, 2, 4, 8, 16, 32)
_MAX_V4 = 8192   # same cap as MAX_V4 in the source

kernels = compile_kernels(
    cuda_src, ["softmax_row_kernel"] + ["softmax_cluster_nv%d" % n for n in _CLUSTER_NV])
BLOCK = kernels.constant("BLOCK")
CLUSTER = kernels.constant("CLUSTER")
_CLUSTER_KERNELS = {n: getattr(kernels, "softmax_cluster_nv%d" % n) for n in _CLUSTER_NV}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 2):
            raise ValueError("softmax: x must be a 2D float32 CUDA tensor (softmax over dim 1)")
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        if rows == 0 or cols == 0:
            return y
        aligned = (cols % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0)
        per_cluster = 4 * BLOCK * CLUSTER
        if aligned and cols % per_cluster == 0 and rows * CLUSTER < (1 << 31):
            nv = cols // per_cluster
            kern = _CLUSTER_KERNELS.get(nv)
            if kern is not None and nv * BLOCK <= _MAX_V4:
                kern.launch(rows * CLUSTER, BLOCK, x, y, cols)
                return y
        vec = 1 if aligned else 0
        kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols, vec)
        return y
