"""Softmax (dim=1), NVRTC form. Fast path: one 8-block thread-block cluster per row. Each block
stages cols/8 floats (32 KiB for 65536 columns) from global into static shared memory with
16-byte cp.async (no register round trip, all loads in flight at once), reduces a local max,
overwrites the staged values with exp(x - local_max) while summing them, publishes its
(max, sum) partial, and after one cluster barrier combines the 8 partials read through DSMEM.
It then scales the cached exponentials by exp(local_max - M) / S and streams them out with
float4 stores. HBM traffic is exactly one read and one write per element.
Fallback (shapes that do not fit the fast path): the seed's one-block-per-row kernel."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;     // tune: 128 256 512 1024
constexpr int CLUSTER = 8;     // blocks per row (portable maximum cluster size)
constexpr int SEG_MAX = 8192;  // floats staged per block: 32 KiB of static shared memory
constexpr int NWARPS = BLOCK / 32;
constexpr int GROUP = 1;       // tune: 1 2 4   (float4 slots per cp.async commit group)
// 6 blocks of ~32 KiB static shared memory fit an SM; cap registers so they also fit by registers
constexpr int MIN_BLOCKS = (2048 / BLOCK < 6) ? 2048 / BLOCK : 6;

#define NEG_INF (-__int_as_float(0x7f800000))

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float nan_max(float a, float b) {
    return (b > a || isnan(b)) ? b : a;   // propagate NaN like PyTorch
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Every thread gets the result. `red` holds 32 floats.
__device__ __forceinline__ float blk_max(float v, float* red) {
    v = warp_max(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) red[w] = v;
    __syncthreads();
    v = (l < NWARPS) ? red[l] : NEG_INF;
    v = warp_max(v);
    __syncthreads();   // red reused right after
    return v;
}

__device__ __forceinline__ float blk_sum(float v, float* red) {
    v = warp_sum(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) red[w] = v;
    __syncthreads();
    v = (l < NWARPS) ? red[l] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned a;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }"
                 : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ void cp_async16(void* dst_smem, const void* src_gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 :: "r"(smem_addr(dst_smem)), "l"(src_gmem) : "memory");
}

__device__ __forceinline__ float2 ld_dsmem_f2(const float2* p, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(remote) : "r"(smem_addr(p)), "r"(rank));
    float a, b;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];"
                 : "=f"(a), "=f"(b) : "r"(remote) : "memory");
    return make_float2(a, b);
}

__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// ---------------------------------------------------------------------------------------------
// fast path: one cluster of CLUSTER blocks per row; block `rank` owns 4*seg4 contiguous floats
// requires cols == CLUSTER * 4 * seg4, 4*seg4 <= SEG_MAX, 16-byte aligned x and y
// ---------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(BLOCK) __cluster_dims__(CLUSTER, 1, 1)
softmax_cluster_kernel(const float* __restrict__ x, float* __restrict__ y,
                       long long cols, long long seg4) {
    __shared__ float4 buf[SEG_MAX / 4];
    __shared__ float red[32];
    __shared__ float2 part;   // this block's (local max, local sum of exp(x - local max))
    __shared__ float2 fin;    // row's (max, sum of exp(x - max))

    unsigned rank, cid;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cid));

    const int n4 = (int)seg4;
    const int tid = threadIdx.x;
    const long long off = (long long)cid * cols + (long long)rank * seg4 * 4;
    const float4* xs = reinterpret_cast<const float4*>(x + off);
    float4* ys = reinterpret_cast<float4*>(y + off);

    // 1. stage the segment: global -> shared, 16 B per cp.async, coalesced, all in flight
    for (int i = tid; i < n4; i += BLOCK) cp_async16(buf + i, xs + i);
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_all;" ::: "memory");
    // each thread only touches the float4s it copied itself until the final pass -> no barrier

    // 2. local max
    float m = NEG_INF;
    for (int i = tid; i < n4; i += BLOCK) {
        const float4 v = buf[i];
        m = nan_max(m, v.x); m = nan_max(m, v.y);
        m = nan_max(m, v.z); m = nan_max(m, v.w);
    }
    m = blk_max(m, red);
    const float mu = (m == NEG_INF) ? 0.0f : m;   // all -inf segment: exp(-inf - 0) = 0

    // 3. exp(x - local max), cached in shared memory, and its sum
    float s = 0.0f;
    for (int i = tid; i < n4; i += BLOCK) {
        float4 v = buf[i];
        v.x = expf(v.x - mu); v.y = expf(v.y - mu);
        v.z = expf(v.z - mu); v.w = expf(v.w - mu);
        buf[i] = v;
        s += (v.x + v.y) + (v.z + v.w);
    }
    s = blk_sum(s, red);
    if (tid == 0) part = make_float2(m, s);

    // 4. exchange partials across the cluster through DSMEM
    cluster_arrive();
    cluster_wait();
    if (tid < 32) {
        float mi = NEG_INF, si = 0.0f;
        if (tid < CLUSTER) {
            const float2 p = ld_dsmem_f2(&part, (unsigned)tid);
            mi = p.x; si = p.y;
        }
        const float M = warp_max(mi);
        const float t = (tid < CLUSTER && mi != NEG_INF) ? si * expf(mi - M) : 0.0f;
        const float S = warp_sum(t);
        if (tid == 0) fin = make_float2(M, S);
    }
    cluster_arrive();   // this block is done reading remote shared memory
    __syncthreads();

    const float2 f = fin;
    // scale for this segment: exp(local max - M) / S. An all -inf segment in a finite row
    // outputs 0; an all -inf row gives 0 * inf = NaN like PyTorch.
    const float c = (m == NEG_INF && f.x != NEG_INF) ? 0.0f : expf(mu - f.x) / f.y;

    // 5. write: shared -> global, coalesced float4 stores
    for (int i = tid; i < n4; i += BLOCK) {
        float4 v = buf[i];
        v.x *= c; v.y *= c; v.z *= c; v.w *= c;
        ys[i] = v;
    }
    cluster_wait();     // keep our shared memory alive until every partner has read it
}

// ---------------------------------------------------------------------------------------------
// specialized fast path: V = seg4 / BLOCK float4 slots per thread, known at compile time.
// Thread t owns slots buf[t + k*BLOCK], k = 0..V-1 (coalesced, conflict-free); every slot offset
// is a constant, so there are no runtime trip counts and no per-slot 64-bit index math.
// The copies go out as NG = V/G commit groups. A wait_group ladder reduces group g (online max,
// exp(x - running max) written back to shared memory, rescaled running sum) while groups
// g+1..NG-1 are still in flight, so the block partial is ready right after the last bytes land.
// The running max used for each group is kept in a register; after the cluster exchange each
// group is scaled once by exp(ref_g - M) / S and streamed out.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void cp_async_wait_pending(int n) {   // n is constant after unrolling
    switch (n) {
        case 0:  asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
        case 1:  asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
        case 2:  asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
        case 3:  asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
        case 4:  asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
        case 5:  asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
        case 6:  asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
        case 7:  asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
        case 8:  asm volatile("cp.async.wait_group 8;" ::: "memory"); break;
        case 9:  asm volatile("cp.async.wait_group 9;" ::: "memory"); break;
        case 10: asm volatile("cp.async.wait_group 10;" ::: "memory"); break;
        case 11: asm volatile("cp.async.wait_group 11;" ::: "memory"); break;
        case 12: asm volatile("cp.async.wait_group 12;" ::: "memory"); break;
        case 13: asm volatile("cp.async.wait_group 13;" ::: "memory"); break;
        case 14: asm volatile("cp.async.wait_group 14;" ::: "memory"); break;
        case 15: asm volatile("cp.async.wait_group 15;" ::: "memory"); break;
        default: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;   // conservative
    }
}

__device__ __forceinline__ float max4(const float4 v) {
    return nan_max(nan_max(v.x, v.y), nan_max(v.z, v.w));
}

// Merge (m2, s2) into (m, s); s is a sum of exp(x - m).
__device__ __forceinline__ void merge_ms(float& m, float& s, float m2, float s2) {
    const float M = nan_max(m, m2);
    const float ref = (M == NEG_INF) ? 0.0f : M;   // avoid (-inf) - (-inf)
    s = s * expf(m - ref) + s2 * expf(m2 - ref);
    m = M;
}

// Block-wide merge of (m, s); every thread gets the result. `red2` holds 32 float2.
// (red2 is not reused afterwards by the caller, so no trailing barrier.)
__device__ __forceinline__ void blk_merge(float& m, float& s, float2* red2) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        merge_ms(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) red2[w] = make_float2(m, s);
    __syncthreads();
    const float2 p = (l < NWARPS) ? red2[l] : make_float2(NEG_INF, 0.0f);
    m = p.x; s = p.y;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        merge_ms(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
}

// requires cols == CLUSTER * 4 * V * BLOCK, 4 * V * BLOCK <= SEG_MAX, 16-byte aligned x and y
template <int V>
__global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) __cluster_dims__(CLUSTER, 1, 1)
softmax_cluster_unrolled(const float* __restrict__ x, float* __restrict__ y, long long cols) {
    constexpr int G = (GROUP < V) ? GROUP : V;   // slots per commit group (V, G powers of 2)
    constexpr int NG = V / G;                      // commit groups, <= 16
    // instantiations too large for SEG_MAX are never launched; keep their buffer small
    constexpr int NBUF = (4 * V * BLOCK <= SEG_MAX) ? V * BLOCK : BLOCK;
    __shared__ float4 buf[NBUF];
    __shared__ float2 red2[32];
    __shared__ float2 part;   // this block's (local max, local sum of exp(x - local max))
    __shared__ float2 fin;    // row's (max, sum of exp(x - max))

    unsigned rank, cid;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cid));

    const int tid = threadIdx.x;
    const long long off = (long long)cid * cols + (long long)rank * (4LL * V * BLOCK);
    const float4* xs = reinterpret_cast<const float4*>(x + off) + tid;
    float4* ys = reinterpret_cast<float4*>(y + off) + tid;
    float4* bs = buf + tid;

    // 1. issue every copy now, one commit group per G slots
#pragma unroll
    for (int g = 0; g < NG; ++g) {
#pragma unroll
        for (int j = 0; j < G; ++j) cp_async16(bs + (g * G + j) * BLOCK, xs + (g * G + j) * BLOCK);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }

    // 2. wait ladder: group g is reduced while the later groups are still in flight.
    //    Each thread reads only the slots it copied itself -> no barrier needed.
    float m = NEG_INF;    // running max of this thread's slots
    float s = 0.0f;       // sum of exp(x - m) over them
    float r[NG];          // running max used as the exp reference of group g
#pragma unroll
    for (int g = 0; g < NG; ++g) {
        cp_async_wait_pending(NG - 1 - g);
        float4 v[G];
        float gm = NEG_INF;
#pragma unroll
        for (int j = 0; j < G; ++j) {
            v[j] = bs[(g * G + j) * BLOCK];
            gm = nan_max(gm, max4(v[j]));
        }
        const float M = nan_max(m, gm);
        const float ref = (M == NEG_INF) ? 0.0f : M;   // all -inf so far: exp(-inf - 0) = 0
        float t = 0.0f;
#pragma unroll
        for (int j = 0; j < G; ++j) {
            float4 e;
            e.x = expf(v[j].x - ref); e.y = expf(v[j].y - ref);
            e.z = expf(v[j].z - ref); e.w = expf(v[j].w - ref);
            bs[(g * G + j) * BLOCK] = e;
            t += (e.x + e.y) + (e.z + e.w);
        }
        s = s * expf(m - ref) + t;
        m = M;
        r[g] = M;
    }
    blk_merge(m, s, red2);
    if (tid == 0) part = make_float2(m, s);

    // 3. exchange partials across the cluster through DSMEM
    cluster_arrive();
    cluster_wait();
    if (tid < 32) {
        float mi = NEG_INF, si = 0.0f;
        if (tid < CLUSTER) {
            const float2 p = ld_dsmem_f2(&part, (unsigned)tid);
            mi = p.x; si = p.y;
        }
        const float M = warp_max(mi);
        const float t = (tid < CLUSTER && mi != NEG_INF) ? si * expf(mi - M) : 0.0f;
        const float S = warp_sum(t);
        if (tid == 0) fin = make_float2(M, S);
    }
    cluster_arrive();   // this block is done reading remote shared memory
    __syncthreads();

    // 4. scale each group once and stream it out. A group whose reference was an all -inf
    //    prefix holds zeros -> 0 in a finite row; an all -inf row gives 0 * inf = NaN like PyTorch.
    const float2 f = fin;
    const float inv = 1.0f / f.y;
#pragma unroll
    for (int g = 0; g < NG; ++g) {
        const float rg = r[g];
        const float c = (rg == NEG_INF && f.x != NEG_INF)
                            ? 0.0f
                            : expf(((rg == NEG_INF) ? 0.0f : rg) - f.x) * inv;
#pragma unroll
        for (int j = 0; j < G; ++j) {
            float4 e = bs[(g * G + j) * BLOCK];
            e.x *= c; e.y *= c; e.z *= c; e.w *= c;
            __stcs(ys + (g * G + j) * BLOCK, e);
        }
    }
    cluster_wait();     // keep our shared memory alive until every partner has read it
}

// ---------------------------------------------------------------------------------------------
// fallback: the seed kernel (one block per row), for shapes the fast path does not cover
// ---------------------------------------------------------------------------------------------
__device__ float block_reduce_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    int p = 1;
    while (p < BLOCK) p <<= 1;
    for (int s = p >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s && threadIdx.x + s < BLOCK) {
            const float o = sh[threadIdx.x + s];
            const float m = sh[threadIdx.x];
            sh[threadIdx.x] = (o > m || isnan(o)) ? o : m;   // propagate NaN like PyTorch
        }
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();   // sh may be reused right after
    return r;
}

__device__ float block_reduce_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    int p = 1;
    while (p < BLOCK) p <<= 1;
    for (int s = p >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s && threadIdx.x + s < BLOCK) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

__global__ void softmax_row_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   long long rows, long long cols) {
    __shared__ float sh[BLOCK];
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = NEG_INF;
        for (long long i = threadIdx.x; i < cols; i += BLOCK) {
            const float v = xr[i];
            m = (v > m || isnan(v)) ? v : m;
        }
        m = block_reduce_max(m, sh);
        float s = 0.0f;
        for (long long i = threadIdx.x; i < cols; i += BLOCK) s += expf(xr[i] - m);
        s = block_reduce_sum(s, sh);
        for (long long i = threadIdx.x; i < cols; i += BLOCK) yr[i] = expf(xr[i] - m) / s;
    }
}
"""

_V_LIST = (1, 2, 4, 8, 16)   # float4 slots per thread that get a specialized kernel
_UNROLLED_NAMES = {v: "softmax_cluster_unrolled<%d>" % v for v in _V_LIST}
kernels = compile_kernels(cuda_src, ["softmax_cluster_kernel", "softmax_row_kernel"]
                          + list(_UNROLLED_NAMES.values()))


def _get_kernel(name):
    k = getattr(kernels, name, None)
    return k if k is not None else kernels[name]


_UNROLLED = {v: _get_kernel(n) for v, n in _UNROLLED_NAMES.items()}
BLOCK = kernels.constant("BLOCK")
CLUSTER = kernels.constant("CLUSTER")
SEG_MAX = kernels.constant("SEG_MAX")


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
        fast = (
            cols % (4 * CLUSTER) == 0
            and cols // CLUSTER <= SEG_MAX
            and x.data_ptr() % 16 == 0
            and y.data_ptr() % 16 == 0
            and rows * CLUSTER < (1 << 31)
        )
        if fast:
            seg4 = cols // (4 * CLUSTER)
            v = seg4 // BLOCK
            if seg4 % BLOCK == 0 and v in _UNROLLED:
                # 4 * v * BLOCK == 4 * seg4 <= SEG_MAX, checked by `fast`
                _UNROLLED[v].launch(rows * CLUSTER, BLOCK, x, y, cols)
            else:
                kernels.softmax_cluster_kernel.launch(rows * CLUSTER, BLOCK, x, y, cols, seg4)
        else:
            kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols)
        return y
