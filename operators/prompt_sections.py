"""The sections of the operators' prompts, each a function of records to Markdown text:
how a kernel did (times, speedups, floors and the bound), its ``ptxas -v`` report, its per-kernel
GPU times, its Nsight Compute metrics, the GPU sheet, a lineage's history and the inspirations.
evokernel.operators.prompts assembles them into requests.

Units: times in ms (µs in the per-kernel tables), bandwidth in GB/s (1e9 bytes/s), rates in
TFLOP/s, memory in KiB/MiB/GiB (powers of 2). "% of the memory floor" is candidate_ms / floor_ms
x 100 (100% = at the floor, evokernel.records.EvalResult.pct_of_floor).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from evokernel.records import EvalResult, KernelProfile, KernelResources, KernelTime

#: Most lineage entries shown (the most recent; tune entries are summarized on one line).
LINEAGE_LIMIT = 24
#: Most rows of a per-kernel table.
KERNEL_ROWS = 8
#: Register file allocation: per warp, in units of this many registers (CUDA Occupancy
#: Calculator, compute capability 7.0-9.0).
REGISTER_UNIT = 256


def _f(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}"


def _bound(result: EvalResult) -> str:
    mem, comp = result.floor_ms, result.compute_floor_ms
    if not mem and not comp:
        return ""
    if not comp:
        return ("bound: memory (the reference's FLOPs are not counted for this problem, so "
                "the memory floor is the only bound)")
    if not mem or comp > mem:
        return ("bound: FP32 compute (the compute reference is above the memory floor: at "
                "best the kernel runs at the FP32 rate)")
    return ("bound: memory (the memory floor is above the FP32 compute reference: at best "
            "the kernel moves its minimum bytes at the copy bandwidth)")


def measurements(result: EvalResult | None) -> str:
    """How a candidate did, as Markdown bullets: time, speedups over PyTorch eager and
    torch.compile, % of the memory floor, % of the FP32 compute reference, which one bounds
    it, and its measured error; or the rejection (reason, detail, error ratios)."""
    if result is None:
        return "- not evaluated yet"
    if not result.accepted:
        lines = [f"- rejected: {result.reason.value}" + (f": {result.detail}" if result.detail
                                                          else "")]
        if result.norm_error_ratio is not None or result.max_error_ratio is not None:
            lines.append(f"- error vs the float64 truth, as a multiple of PyTorch's FP32 error: "
                         f"norm-wise {result.norm_error_ratio}, element-wise "
                         f"{result.max_error_ratio}"
                         f" (bound {result.tolerance_factor}) on the '{result.distribution}' "
                         "inputs")
        return "\n".join(lines)
    lines = []
    if result.candidate_ms is not None:
        lines.append(f"- time: {_f(result.candidate_ms)} ms (median of interleaved trials, L2 "
                     "flushed before each)")
    if result.reference_ms:
        lines.append(f"- PyTorch eager (TF32 off): {_f(result.reference_ms)} ms -> speedup "
                     f"{result.speedup:.3g}x")
    if result.compile_ms:
        lines.append(f"- torch.compile: {_f(result.compile_ms)} ms -> speedup "
                     f"{result.compile_speedup:.3g}x")
    if result.floor_ms and result.candidate_ms:
        lines.append(f"- memory floor: {_f(result.floor_ms)} ms (minimum bytes: each input read "
                     "once, each output written once, over the GPU's measured bandwidth); this "
                     f"kernel takes {result.pct_of_floor:.0f}% of it (its minimum bytes move "
                     f"at {100 * result.floor_ms / result.candidate_ms:.0f}% of that bandwidth)")
    if result.compute_floor_ms and result.candidate_ms:
        lines.append(f"- FP32 compute reference: {_f(result.compute_floor_ms)} ms (the reference "
                     "algorithm's FLOPs over the measured FP32 rate); this kernel takes "
                     f"{100 * result.candidate_ms / result.compute_floor_ms:.0f}% of it (a "
                     "reference, not a limit: a kernel may do less work)")
    if _bound(result):
        lines.append(f"- {_bound(result)}")
    if result.norm_error_ratio is not None:
        lines.append(f"- error: norm-wise {result.norm_error_ratio:.3g}x and element-wise "
                     f"{result.max_error_ratio:.3g}x PyTorch's own FP32 error (bound "
                     f"{result.tolerance_factor}x)")
    return "\n".join(lines) or "- accepted (no times recorded)"


def _warps_by_registers(registers: int, device: Mapping[str, Any]) -> str:
    per_sm, cap = device.get("registers_per_sm"), device.get("max_warps_per_sm")
    if not per_sm or registers <= 0:
        return "-"
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    warps = per_sm // per_warp
    return str(min(warps, cap) if cap else warps)


def ptxas_table(resources: Sequence[KernelResources], device: Mapping[str, Any]) -> str:
    """The ``ptxas -v`` report as a Markdown table, with the resident warps per SM that each
    kernel's registers allow (registers per SM / registers per warp rounded up to REGISTER_UNIT;
    shared memory and block size may allow fewer); "" when there is no report."""
    if not resources:
        return ""
    rows = ["| kernel | registers/thread | warps/SM by registers | spill stores B | "
            "spill loads B | stack B | static shared B |", "|---|---|---|---|---|---|---|"]
    for r in resources[:KERNEL_ROWS]:
        rows.append(f"| `{r.name}` | {r.registers} | {_warps_by_registers(r.registers, device)}"
                    f" | {r.spill_store_bytes} | {r.spill_load_bytes} | {r.stack_bytes} | "
                    f"{r.shared_bytes} |")
    if len(resources) > KERNEL_ROWS:
        rows.append(f"| ({len(resources) - KERNEL_ROWS} more kernels) | | | | | | |")
    return "\n".join(rows)


def kernel_table(kernels: Sequence[KernelTime]) -> str:
    """The GPU time of one profiled call per kernel (torch.profiler), largest first, with its
    share of the call's total; "" when none were recorded."""
    if not kernels:
        return ""
    total = sum(k.gpu_us for k in kernels) or 1.0
    rows = ["| kernel | whose | launches | GPU µs | share |", "|---|---|---|---|---|"]
    ordered = sorted(kernels, key=lambda k: -k.gpu_us)
    for k in ordered[:KERNEL_ROWS]:
        rows.append(f"| `{k.name}` | {'candidate' if k.own else 'library'} | {k.launches} | "
                    f"{k.gpu_us:.1f} | {100 * k.gpu_us / total:.0f}% |")
    if len(ordered) > KERNEL_ROWS:
        rest = sum(k.gpu_us for k in ordered[KERNEL_ROWS:])
        rows.append(f"| ({len(ordered) - KERNEL_ROWS} more) | | | {rest:.1f} | "
                    f"{100 * rest / total:.0f}% |")
    return "\n".join(rows)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def profile_table(profile: Sequence[KernelProfile]) -> str:
    """Nsight Compute metrics per kernel (evokernel.engine.ncu) as a Markdown table; "" when the
    run did not profile."""
    if not profile:
        return ""
    rows = ["| kernel | launches | µs | DRAM throughput % of peak | achieved occupancy % | "
            "SM throughput % of peak | L2 hit rate % |", "|---|---|---|---|---|---|---|"]
    for k in profile[:KERNEL_ROWS]:
        us = "-" if k.duration_us is None else f"{k.duration_us:.1f}"
        rows.append(f"| `{k.name}` | {k.launches} | {us} | {_pct(k.dram_throughput_pct)} | "
                    f"{_pct(k.achieved_occupancy_pct)} | {_pct(k.sm_throughput_pct)} | "
                    f"{_pct(k.l2_hit_rate_pct)} |")
    return "\n".join(rows)


def kernel_report(result: EvalResult | None, device: Mapping[str, Any], level: str = "##"
                  ) -> str:
    """Measurements, ptxas report, per-kernel times and ncu metrics of one candidate, each
    under a heading of ``level``; the empty ones left out."""
    parts = [measurements(result)]
    if result is not None:
        for title, table in (
                ("`ptxas -v` report (per thread registers, bytes)",
                 ptxas_table(result.resources, device)),
                ("GPU time of one call, per kernel (torch.profiler)", kernel_table(result.kernels)),
                ("Nsight Compute, one call (`ncu --clock-control none`)",
                 profile_table(result.profile))):
            if table:
                parts.append(f"{level} {title}\n{table}")
    return "\n\n".join(parts)


def gpu_sheet(device: Mapping[str, Any]) -> str:
    """The GPU sheet (evokernel.engine.device_sheet keys) as Markdown bullets; keys it lacks are
    left out, other keys of the worker's info are not shown (no TF32/BF16 rates)."""
    d = device
    if not d or "device" not in d:
        return "- unknown (assume a recent NVIDIA datacenter GPU)"
    head = f"- {d['device']}"
    if d.get("capability"):
        head += f", compute capability {d['capability']}"
    if d.get("arch"):
        head += f" (kernels are built for sm_{str(d['arch']).replace('.', '')})"
    if d.get("sm_count"):
        head += f", {d['sm_count']} SMs"
    lines = [head]
    per_sm = [f"{d['registers_per_sm']} 32-bit registers (at most "
              f"{d.get('max_registers_per_thread', 255)} per thread)"
              if d.get("registers_per_sm") else "",
              f"{d['shared_mem_per_sm_kb']} KiB shared memory" if d.get("shared_mem_per_sm_kb")
              else "",
              f"{d['max_threads_per_sm']} threads ({d.get('max_warps_per_sm', '?')} warps)"
              if d.get("max_threads_per_sm") else "",
              f"{d['max_blocks_per_sm']} resident blocks" if d.get("max_blocks_per_sm") else ""]
    if any(per_sm):
        lines.append("- per SM: " + ", ".join(x for x in per_sm if x))
    if d.get("shared_mem_per_block_kb"):
        block = (f"- per block: at most {d.get('max_threads_per_block', 1024)} threads; "
                 f"{d['shared_mem_per_block_kb']} KiB shared memory")
        if d.get("shared_mem_per_block_optin_kb"):
            block += (f", up to {d['shared_mem_per_block_optin_kb']} KiB of dynamic shared "
                      "memory after cudaFuncSetAttribute(kernel, "
                      "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)")
        lines.append(block)
    memory = [f"L2 {d['l2_mb']} MiB" if d.get("l2_mb") else "",
              f"{d['total_memory_gb']} GiB HBM" if d.get("total_memory_gb") else "",
              f"peak {d['hbm_peak_gbs']} GB/s (memory clock x bus width)"
              if d.get("hbm_peak_gbs") else "",
              f"measured copy bandwidth {d['copy_gbs']:.0f} GB/s (read + write of a 1 GiB "
              "device copy)" if d.get("copy_gbs") else "",
              f"measured read {d['read_gbs']:.0f} GB/s" if d.get("read_gbs") else "",
              f"measured write {d['write_gbs']:.0f} GB/s" if d.get("write_gbs") else ""]
    if any(memory):
        lines.append("- memory: " + "; ".join(x for x in memory if x))
    fp32 = [f"{d['fp32_tflops']:.1f} TFLOP/s measured (FP32 matmul, TF32 off)"
            if d.get("fp32_tflops") else "",
            f"{d['fp32_peak_tflops']} TFLOP/s peak (FMA lanes x clock)"
            if d.get("fp32_peak_tflops") else ""]
    if any(fp32):
        lines.append("- FP32: " + "; ".join(x for x in fp32 if x))
    if d.get("clusters"):
        lines.append(f"- thread-block clusters of up to {d.get('max_cluster_blocks_portable', 8)}"
                     " blocks (portable size) with distributed shared memory")
    if d.get("async_copy") and d["async_copy"] != "none":
        lines.append(f"- asynchronous copies: {d['async_copy']}")
    return "\n".join(lines)


def _attempt_line(a: Any) -> str:
    idea = (a.idea or "(no idea text)").strip().splitlines()[0][:300]
    if a.reason == "ok":
        gain = a.gain
        outcome = f"accepted, {a.speedup:.3g}x" + (f", gain {gain:.3g}x over its parent"
                                                   if gain is not None else "")
    else:
        outcome = f"rejected ({a.reason})" + (f": {a.detail.splitlines()[0][:300]}"
                                              if a.detail else "")
    return f"- generation {a.generation}, {a.operator}: {idea} -> {outcome}"


def history(attempts: Sequence[Any], limit: int = LINEAGE_LIMIT) -> str:
    """Attempts (evokernel.operators.base.Attempt), oldest first: the most recent ``limit``
    non-tune ones, one line each with the gain over the parent or the rejection's detail, and
    the tune attempts summarized in one line."""
    if not attempts:
        return "- none yet"
    tunes = [a for a in attempts if a.operator == "tune"]
    others = [a for a in attempts if a.operator != "tune"]
    lines = [_attempt_line(a) for a in others[-limit:]]
    if len(others) > limit:
        lines.insert(0, f"- ({len(others) - limit} older attempts not shown)")
    if tunes:
        gains = [a.gain for a in tunes if a.gain is not None]
        rejected = sum(1 for a in tunes if a.reason != "ok")
        best = f", best gain {max(gains):.3g}x over its parent" if gains else ""
        lines.append(f"- {len(tunes)} tune variants (constants marked `// tune:`){best}, "
                     f"{rejected} rejected")
    return "\n".join(lines)
