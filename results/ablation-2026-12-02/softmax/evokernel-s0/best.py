# evokernel: best kernel of run evokernel-s0 for problem softmax
# candidate 069ae0ad6413467f, generation 2, operator idea; speedup 1.943x over eager (1.0508 ms -> 0.5409 ms, 114% of floor)
# idea: [control_flow] Compile-time specialized, fully unrolled, pipelined staging: make the cluster kernel a template `softmax_cluster_kernel<V>` with V = seg4/BLOCK float4 per thread (V=8 for 65536 cols at BLOCK=256, compiled by name, generic loop kept as fallback for other V), fully `#pragma unroll` every per-thread loop over slots `buf[tid + k*BLOCK]` so there are no runtime trip counts or 64-bit index math, and issue the V cp.async as V separate commit groups followed by an unrolled ladder `cp.async.wait_group V-1-k` so the max over slot k (read into registers) starts while slots k+1..V-1 are still in flight instead of waiting for all of them.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/evokernel-s0/best.py
"""Softmax (dim=1), NVRTC form. Fast path: one 8-block thread-block cluster per row. Each block
stages cols/8 floats (32 KiB for 65536 columns) from global into static shared memory with
16-byte cp.async (no register round trip, all loads in flight at once), reduces a local max,
overwrites the staged values with exp(x - local_max) while summing them, publishes its
(max, sum) partial, and after one cluster barrier combines the 8 partials read through DSMEM.
It then scales the cached exponentials by exp(local_max - M) / S and streams them out with
float4 stores. HBM traffic is exactly one read and one write per element.
Specialized path (cols == CLUSTER * 4 * VF * BLOCK, VF = SEG_MAX / 4 / BLOCK, i.e. 65536 columns):
the same cluster scheme with compile-time trip counts, cp.async issued as NG commit groups that a
wait_group ladder drains one at a time, and max + sum of exp fused into one online pass over each
group as it lands (exp(x - running max) cached in place, rescaled per group at the end).
Fallback (shapes that do not fit the fast path): the seed's one-block-per-row kernel."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;     // tune: 128 256 512 1024
constexpr int CLUSTER = 8;     // blocks per row (portable maximum cluster size)
constexpr int SEG_MAX = 8192;  // floats staged per block: 32 KiB of static shared memory
constexpr int NWARPS = BLOCK / 32;
// specialized path: float4 slots per thread when a block stages exactly SEG_MAX floats
constexpr int VF = SEG_MAX / 4 / BLOCK;                 // 16 8 4 2 for BLOCK 128 256 512 1024
constexpr int GROUP = 2;       // tune: 1 2 4
constexpr int GF = (GROUP < VF) ? GROUP : VF;           // slots per cp.async commit group
constexpr int NG = VF / GF;                             // commit groups per thread (<= 16)
constexpr int MIN_BLOCKS = 6;  // tune: 1 4 6
constexpr int MINB = (MIN_BLOCKS * BLOCK <= 2048) ? MIN_BLOCKS : 2048 / BLOCK;

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

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// wait until at most n commit groups of this thread are pending. wait_group needs an immediate;
// inside fully unrolled loops n is a constant and the switch folds to one instruction.
#define CP_WAIT_CASE(N) case N: asm volatile("cp.async.wait_group " #N ";" ::: "memory"); break;
__device__ __forceinline__ void cp_async_wait_pending(int n) {
    switch (n) {
        CP_WAIT_CASE(0)  CP_WAIT_CASE(1)  CP_WAIT_CASE(2)  CP_WAIT_CASE(3)
        CP_WAIT_CASE(4)  CP_WAIT_CASE(5)  CP_WAIT_CASE(6)  CP_WAIT_CASE(7)
        CP_WAIT_CASE(8)  CP_WAIT_CASE(9)  CP_WAIT_CASE(10) CP_WAIT_CASE(11)
        CP_WAIT_CASE(12) CP_WAIT_CASE(13) CP_WAIT_CASE(14) CP_WAIT_CASE(15)
        default: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;   // conservative
    }
}

// merge (m2, s2) into (m, s); s is a sum of exp(x - ref(m)), ref(m) = (m == -inf) ? 0 : m
__device__ __forceinline__ void merge_ms(float& m, float& s, float m2, float s2) {
    const float M = nan_max(m, m2);
    const float r = (M == NEG_INF) ? 0.0f : M;
    s = s * expf(m - r) + s2 * expf(m2 - r);
    m = M;
}

__device__ __forceinline__ void warp_merge(float& m, float& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge_ms(m, s, m2, s2);
    }
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
// specialized fast path: cols == CLUSTER * 4 * VF * BLOCK, so every per-thread loop has a
// compile-time trip count and unrolls fully (constant smem/global offsets, no 64-bit index math
// in the loops). Thread t owns slots buf[t + k*BLOCK], k < VF, copied by itself, so no block
// barrier is needed before reading them. The slots arrive in NG commit groups of GF; group g is
// reduced (online max + sum of exp) as soon as `wait_group NG-1-g` lets it through, while groups
// g+1.. are still in flight. exp(x - running max after g) is cached in place and the final pass
// scales group g by exp(mg[g] - M) / S.
// ---------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(BLOCK, MINB) __cluster_dims__(CLUSTER, 1, 1)
softmax_cluster_fast(const float* __restrict__ x, float* __restrict__ y) {
    __shared__ float4 buf[VF * BLOCK];
    __shared__ float shm[32];
    __shared__ float shs[32];
    __shared__ float2 part;   // this block's (max, sum of exp(x - max))
    __shared__ float2 fin;    // row's (max, sum of exp(x - max))

    const int tid = threadIdx.x;
    // 1-D grid, (CLUSTER,1,1) clusters: blockIdx.x == cluster id * CLUSTER + rank, so this
    // block's segment starts at blockIdx.x * VF * BLOCK float4s
    const long long seg = (long long)blockIdx.x * (VF * BLOCK);
    const float4* xt = reinterpret_cast<const float4*>(x) + seg + tid;
    float4* yt = reinterpret_cast<float4*>(y) + seg + tid;
    float4* bt = buf + tid;

    // 1. issue every copy, one commit group per GF slots
#pragma unroll
    for (int g = 0; g < NG; ++g) {
#pragma unroll
        for (int j = 0; j < GF; ++j) cp_async16(bt + (g * GF + j) * BLOCK, xt + (g * GF + j) * BLOCK);
        cp_async_commit();
    }

    // 2. wait_group ladder: online (max, sum of exp) over each group as it lands
    float m = NEG_INF, s = 0.0f;
    float mg[NG];   // running max after group g (exp reference of that group's cached values)
#pragma unroll
    for (int g = 0; g < NG; ++g) {
        cp_async_wait_pending(NG - 1 - g);
        float4 v[GF];
        float cm = NEG_INF;
#pragma unroll
        for (int j = 0; j < GF; ++j) {
            v[j] = bt[(g * GF + j) * BLOCK];
            cm = nan_max(cm, nan_max(nan_max(v[j].x, v[j].y), nan_max(v[j].z, v[j].w)));
        }
        const float mn = nan_max(m, cm);
        const float r = (mn == NEG_INF) ? 0.0f : mn;   // all -inf so far: exp(-inf - 0) = 0
        float t = 0.0f;
#pragma unroll
        for (int j = 0; j < GF; ++j) {
            float4 e;
            e.x = expf(v[j].x - r); e.y = expf(v[j].y - r);
            e.z = expf(v[j].z - r); e.w = expf(v[j].w - r);
            bt[(g * GF + j) * BLOCK] = e;
            t += (e.x + e.y) + (e.z + e.w);
        }
        s = fmaf(s, expf(m - r), t);   // m == -inf: s == 0 and expf(-inf) == 0
        m = mn;
        mg[g] = mn;
    }

    // 3. block merge of the per-thread (max, sum) pairs: shuffles, then warp 0
    {
        float bm = m, bs = s;
        warp_merge(bm, bs);
        const int w = tid >> 5, l = tid & 31;
        if (l == 0) { shm[w] = bm; shs[w] = bs; }
        __syncthreads();
        if (w == 0) {
            bm = (l < NWARPS) ? shm[l] : NEG_INF;
            bs = (l < NWARPS) ? shs[l] : 0.0f;
            warp_merge(bm, bs);
            if (l == 0) part = make_float2(bm, bs);
        }
    }

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

    // 5. scale each group by exp(mg - M) / S and stream out. A group with an all -inf prefix
    // (mg == -inf) in a finite row outputs 0; an all -inf row gives 0 * inf = NaN like PyTorch.
#pragma unroll
    for (int g = 0; g < NG; ++g) {
        const float mu = (mg[g] == NEG_INF) ? 0.0f : mg[g];
        const float c = (mg[g] == NEG_INF && f.x != NEG_INF) ? 0.0f : expf(mu - f.x) / f.y;
#pragma unroll
        for (int j = 0; j < GF; ++j) {
            float4 v = bt[(g * GF + j) * BLOCK];
            v.x *= c; v.y *= c; v.z *= c; v.w *= c;
            __stcs(yt + (g * GF + j) * BLOCK, v);
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

kernels = compile_kernels(
    cuda_src, ["softmax_cluster_fast", "softmax_cluster_kernel", "softmax_row_kernel"])
BLOCK = kernels.constant("BLOCK")
CLUSTER = kernels.constant("CLUSTER")
SEG_MAX = kernels.constant("SEG_MAX")
VF = SEG_MAX // (4 * BLOCK)   # float4 slots per thread of softmax_cluster_fast (as in the source)


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
            if seg4 == VF * BLOCK:
                kernels.softmax_cluster_fast.launch(rows * CLUSTER, BLOCK, x, y)
            else:
                kernels.softmax_cluster_kernel.launch(rows * CLUSTER, BLOCK, x, y, cols, seg4)
        else:
            kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols)
        return y
