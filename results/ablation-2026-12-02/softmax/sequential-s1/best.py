# evokernel: best kernel of run sequential-s1 for problem softmax
# candidate 800dc2261777e4fb, generation 11, operator idea; speedup 1.877x over eager (1.0531 ms -> 0.5609 ms, 116% of floor)
# idea: [parallelism] Shared memory, not threads or registers, is what caps the kernel at 6 resident blocks/SM (6 x ~33 KB), while the register file is mostly idle (36 regs x 1536 threads). Split each block's 32 KB slice between the two: with THREADS=128, a new `constexpr int REG_VEC = 4; // tune: 2 4` and STAGE_VEC = SLICE_VEC - REG_VEC*THREADS (static_assert it is > 0), TMA-load only the first STAGE_VEC float4 (24 KB at REG_VEC=4) into the static stage. Use NCHUNK = ceil(STAGE_BYTES / CHUNK_BYTES) per-chunk mbarriers with the existing clamped byte counts. Right after thread 0 arms the barriers, each thread issues REG_VEC coalesced `ld.global.nc.L1::no_allocate.v4.f32` loads of j = STAGE_VEC + k*THREADS + tid into a register array (masked to -inf when j >= nslice), so their latency overlaps the chunk waits. These register values join the max pass, are overwritten in place with e = expf(v - ms) in the sum pass, and are stored with __stcs after the DSMEM exchange, exactly like the stage entries. Then raise occupancy with `BLOCKS_PER_SM = 8; // tune: 6 7 8` and __launch_bounds__(128, LB_BLOCKS), which leaves up to 64 regs/thread and ~25.6 KB of smem per block, so 8 blocks (one whole row's cluster) fit on each SM instead of 6. That puts about 33% more bytes in flight per SM and hides more of each block's load -> cluster.sync -> store latency behind other rows.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/sequential-s1/best.py
"""Softmax (dim=1), NVRTC form.

Fast path: one thread-block cluster of CLUSTER=8 blocks per row (non-persistent, grid 8*rows).
Each block owns a 32 KB slice of the row, which thread 0 copies from HBM into a static
shared-memory stage in one shot with TMA bulk copies
(cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes) tracked by a single-use
mbarrier per 4-8 KB chunk. Only the first STAGE_VEC float4 of the slice (24 KB at THREADS=128,
REG_VEC=4) go through that stage; the last REG_VEC float4 per thread are loaded straight into
registers with coalesced ld.global.nc.L1::no_allocate loads issued right after the TMA, so their
latency overlaps the chunk waits. The block max, the in-place e = exp(v - m_b) (stage and
registers) with its block sum, the DSMEM (max, sum) exchange and the y = e * scale streaming
store use both halves. Splitting the slice between shared memory and the otherwise idle register
file shrinks a block's smem to ~25 KB, so 8 blocks (one whole row's cluster) fit per SM instead
of 6, and more rows' HBM traffic is in flight while other blocks reduce and cluster-sync.
x is read from HBM once and y is written once.
Fallback (other shapes / alignments): the seed's one-block-per-row kernel."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// ---------------------------------------------------------------------------------------------
// Fallback: seed kernel (one block per row, three strided passes).
// ---------------------------------------------------------------------------------------------
constexpr int BLOCK = 256;  // tune: 64 128 256 512 1024

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
    __syncthreads();
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
        float m = -__int_as_float(0x7f800000);   // -inf
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

// ---------------------------------------------------------------------------------------------
// Fast path: one cluster of CLUSTER blocks per row, each block's slice held in shared memory.
// ---------------------------------------------------------------------------------------------
constexpr int CLUSTER = 8;          // blocks per row (fixed: 8 keeps a block's 32 KB slice in static smem)
constexpr int THREADS = 128;        // tune: 128 256
constexpr int BLOCKS_PER_SM = 8;    // tune: 6 7 8
constexpr int REG_VEC = 4;          // tune: 2 4
constexpr int CHUNK_BYTES = 4096;   // tune: 4096 8192
constexpr int ROW_CAP = 65536;      // max row length the fast path handles
constexpr int SLICE_VEC = ROW_CAP / (4 * CLUSTER);   // float4 per block slice (2048 = 32 KB)
constexpr int VEC = SLICE_VEC / THREADS;             // float4 per thread (stage + registers)
constexpr int SVEC = VEC - REG_VEC;                  // float4 per thread held in the smem stage
constexpr int STAGE_VEC = SLICE_VEC - REG_VEC * THREADS;   // float4 of the slice in the stage
constexpr int STAGE_BYTES = STAGE_VEC * 16;
constexpr int NWARPS = THREADS / 32;
constexpr int NCHUNK = (STAGE_BYTES + CHUNK_BYTES - 1) / CHUNK_BYTES;   // one mbarrier per TMA chunk
// Minimum resident blocks requested from ptxas, clamped to the SM's 2048-thread limit.
constexpr int LB_BLOCKS = (BLOCKS_PER_SM * THREADS > 2048) ? (2048 / THREADS) : BLOCKS_PER_SM;
static_assert(VEC >= 1 && VEC * THREADS == SLICE_VEC, "bad fast-path sizes");
static_assert(REG_VEC >= 1 && REG_VEC < VEC, "REG_VEC must leave part of the slice in the stage");
static_assert(STAGE_VEC > 0 && SVEC * THREADS == STAGE_VEC, "bad stage size");
static_assert(THREADS % 32 == 0, "THREADS must be a multiple of 32");
static_assert(STAGE_BYTES <= 40 * 1024, "stage must fit in static shared memory");
static_assert(CHUNK_BYTES > 0 && CHUNK_BYTES % 16 == 0, "bulk copy size must be a multiple of 16");
static_assert(NCHUNK >= 1, "need at least one chunk");
static_assert(LB_BLOCKS >= 1, "bad launch bounds");

__device__ __forceinline__ float nan_max(float a, float b) {
    return (b > a || isnan(b)) ? b : a;   // NaN-propagating max
}

// ---- PTX helpers: shared addresses, mbarrier, TMA bulk copy ----
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }"
                 :: "r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

__device__ __forceinline__ void tma_load_1d(unsigned dst, const void* src, unsigned bytes,
                                            unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// Streaming 16-byte global load (read-only path, no L1 allocation). volatile keeps it issued
// where it is written, i.e. before the chunk waits, so its latency overlaps them.
__device__ __forceinline__ float4 ldg_stream(const float4* p) {
    float4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
    return r;
}

__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, LB_BLOCKS)
softmax_cluster_smem_kernel(const float* __restrict__ x, float* __restrict__ y, long long cols) {
    __shared__ __align__(128) float4 stage[STAGE_VEC];
    __shared__ __align__(8) unsigned long long bar[NCHUNK];
    __shared__ float s_max[NWARPS];
    __shared__ float s_sum[NWARPS];
    __shared__ float2 s_pair;

    cg::cluster_group cluster = cg::this_cluster();
    const unsigned int rank = cluster.block_rank();
    const long long row = (long long)(blockIdx.x / CLUSTER);
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const float NEG_INF = -__int_as_float(0x7f800000);

    const long long nvec = cols >> 2;
    const long long vbase = (long long)rank * SLICE_VEC;   // first float4 of this block's slice
    long long nv = nvec - vbase;
    nv = nv < 0 ? 0 : (nv > (long long)SLICE_VEC ? (long long)SLICE_VEC : nv);
    const int nslice = (int)nv;                           // float4 of the slice inside the row
    const int nstage = nslice < STAGE_VEC ? nslice : STAGE_VEC;   // of which go through the stage
    const unsigned stage_bytes = (unsigned)nstage * 16u;
    const unsigned bar_a = smem_addr(bar);   // barrier c lives at bar_a + 8 * c
    const unsigned stage_a = smem_addr(stage);
    const float4* __restrict__ xs = reinterpret_cast<const float4*>(x + row * cols) + vbase;

    // ---- single read of x, part 1: chunked TMA bulk copies of the first STAGE_VEC float4 ----
    if (tid == 0) {
#pragma unroll
        for (int c = 0; c < NCHUNK; ++c) mbar_init(bar_a + 8u * (unsigned)c, 1u);
        fence_mbar_init();
    }
    __syncthreads();
    if (tid == 0) {
        // Every chunk barrier is armed, in chunk order; empty tail chunks are armed with tx 0,
        // which completes their phase at once, so no later wait can deadlock.
        const char* src = reinterpret_cast<const char*>(xs);
#pragma unroll
        for (int c = 0; c < NCHUNK; ++c) {
            const unsigned off = (unsigned)c * (unsigned)CHUNK_BYTES;
            const unsigned rem = (stage_bytes > off) ? (stage_bytes - off) : 0u;
            const unsigned n = (rem < (unsigned)CHUNK_BYTES) ? rem : (unsigned)CHUNK_BYTES;
            const unsigned b = bar_a + 8u * (unsigned)c;
            mbar_arrive_expect_tx(b, n);
            if (n > 0u) tma_load_1d(stage_a + off, src + off, n, b);
        }
    }

    // ---- single read of x, part 2: the last REG_VEC * THREADS float4 straight into registers
    //      (coalesced; masked to -inf outside the row), in flight while the chunks arrive ----
    float4 rv[REG_VEC];
#pragma unroll
    for (int k = 0; k < REG_VEC; ++k) {
        const int j = STAGE_VEC + k * THREADS + tid;
        if (j < nslice) rv[k] = ldg_stream(xs + j);
        else            rv[k] = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    }

    // ---- block max, pipelined against the load: before touching stage float4 k, wait on every
    //      chunk barrier up to the one holding its last byte (tail entries are skipped) ----
    float m = NEG_INF;
    int waited = 0;   // chunks already waited on (a compile-time value once the loop is unrolled)
#pragma unroll
    for (int k = 0; k < SVEC; ++k) {
        const int need = ((k + 1) * THREADS * 16 - 1) / CHUNK_BYTES;
#pragma unroll
        for (; waited <= need; ++waited) mbar_wait(bar_a + 8u * (unsigned)waited, 0u);
        const int j = k * THREADS + tid;
        if (j < nslice) {
            const float4 t = stage[j];
            m = nan_max(m, t.x);
            m = nan_max(m, t.y);
            m = nan_max(m, t.z);
            m = nan_max(m, t.w);
        }
    }
    // register part (entries outside the row are -inf, which leaves m unchanged)
#pragma unroll
    for (int k = 0; k < REG_VEC; ++k) {
        m = nan_max(m, rv[k].x);
        m = nan_max(m, rv[k].y);
        m = nan_max(m, rv[k].z);
        m = nan_max(m, rv[k].w);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) s_max[warp] = m;
    __syncthreads();
    m = s_max[0];
#pragma unroll
    for (int w = 1; w < NWARPS; ++w) m = nan_max(m, s_max[w]);

    // ---- e = exp(v - m) computed ONCE, written back in place (stage and registers), and
    //      block-summed (an all -inf block gets e = 0 and contributes 0, not NaN; each thread
    //      touches only its own entries, so no barrier is needed before this in-place update) ----
    const float ms = (m == NEG_INF) ? 0.0f : m;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < SVEC; ++k) {
        const int j = k * THREADS + tid;
        if (j < nslice) {
            const float4 t = stage[j];
            const float a = expf(t.x - ms);
            const float b = expf(t.y - ms);
            const float c = expf(t.z - ms);
            const float d = expf(t.w - ms);
            stage[j] = make_float4(a, b, c, d);
            s += (a + b) + (c + d);
        }
    }
#pragma unroll
    for (int k = 0; k < REG_VEC; ++k) {
        const int j = STAGE_VEC + k * THREADS + tid;
        if (j < nslice) {
            const float a = expf(rv[k].x - ms);
            const float b = expf(rv[k].y - ms);
            const float c = expf(rv[k].z - ms);
            const float d = expf(rv[k].w - ms);
            rv[k] = make_float4(a, b, c, d);
            s += (a + b) + (c + d);
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) s_sum[warp] = s;
    __syncthreads();
    s = s_sum[0];
#pragma unroll
    for (int w = 1; w < NWARPS; ++w) s += s_sum[w];

    // ---- publish (max, sum) and exchange across the cluster via DSMEM ----
    if (tid == 0) s_pair = make_float2(m, s);
    cluster.sync();

    float2 p[CLUSTER];
    float M = NEG_INF;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) {
        p[r] = *cluster.map_shared_rank(&s_pair, r);
        M = nan_max(M, p[r].x);
    }
    // Remote reads are done: arrive now, wait before exit (keeps smem alive for the others).
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");

    float S = 0.0f;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) {
        const float mr = p[r].x;
        S += (mr == M) ? p[r].y : p[r].y * expf(mr - M);
    }
    // y = exp(v - M) / S = exp(v - m) * (exp(m - M) / S): one per-block scale.
    // (m == M gives exp(0) = 1 exactly; an all -inf row gives exp(NaN) -> NaN like PyTorch;
    //  an all -inf block in a finite row gives scale 0 and e = 0 -> y = 0.)
    const float scale = expf(m - M) / S;

    // ---- single write of y: the stage part streamed from smem, then the register part ----
    float4* __restrict__ yr = reinterpret_cast<float4*>(y + row * cols) + vbase;
#pragma unroll
    for (int k = 0; k < SVEC; ++k) {
        const int j = k * THREADS + tid;
        if (j < nslice) {
            float4 o = stage[j];
            o.x *= scale;
            o.y *= scale;
            o.z *= scale;
            o.w *= scale;
            __stcs(yr + j, o);
        }
    }
#pragma unroll
    for (int k = 0; k < REG_VEC; ++k) {
        const int j = STAGE_VEC + k * THREADS + tid;
        if (j < nslice) {
            float4 o = rv[k];
            o.x *= scale;
            o.y *= scale;
            o.z *= scale;
            o.w *= scale;
            __stcs(yr + j, o);
        }
    }

    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
"""

kernels = compile_kernels(cuda_src, ["softmax_row_kernel", "softmax_cluster_smem_kernel"])
BLOCK = kernels.constant("BLOCK")
CLUSTER = kernels.constant("CLUSTER")
THREADS = kernels.constant("THREADS")
ROW_CAP = kernels.constant("ROW_CAP")


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
            cols <= ROW_CAP
            and cols % 4 == 0
            and x.data_ptr() % 16 == 0
            and y.data_ptr() % 16 == 0
            and rows * CLUSTER <= (1 << 31) - 1
        )
        if fast:
            kernels.softmax_cluster_smem_kernel.launch(rows * CLUSTER, THREADS, x, y, cols)
        else:
            kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols)
        return y
