"""The compute precision of a training step: bfloat16 autocast where the hardware runs it natively, float32 elsewhere.

On CUDA the base is loaded in bf16 and the loop runs under bf16 autocast. On CPU the weights stay float32 and the
loop runs under `torch.autocast("cpu", dtype=torch.bfloat16)` only where the CPU has native bf16 arithmetic (AMX
tiles or AVX-512-BF16): there one LoRA step of SmolLM2-135M took 5.5 s vs 10.5 s in float32 (issue #16). Without
those instructions oneDNN emulates bf16 through float32 conversions and autocast is slower than plain float32, so
`auto` keeps float32 there. `--precision fp32|bf16` overrides the choice for one run; `$DISTILLERY_AUTO_PRECISION`
(fp32 or bf16) overrides what `auto` picks on a node (a pool whose CPUs report bf16 but compute it badly, or the test
suite forcing the path the CPU would not take: `DISTILLERY_AUTO_PRECISION=fp32 scripts/test.sh` runs the AVX2 path
on an AVX-512-BF16 machine, `=bf16` the native one on an AVX2 machine, emulated). The choice and its reason are
printed and each step records the precision it ran in (`result.json` `precision`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from steps import sizing

PRECISIONS = sizing.PRECISIONS  # preflight sizes the run for the one it is given

AUTO_ENV = "DISTILLERY_AUTO_PRECISION"

# /proc/cpuinfo flags of native bf16 arithmetic: Intel AMX (Sapphire Rapids on) and AVX-512-BF16 (Cooper Lake, Zen 4)
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


@dataclass(frozen=True)
class Precision:
    name: str  # "fp32" or "bf16"
    reason: str  # why: printed at start and kept for the run's record

    @property
    def autocast(self) -> bool:
        return self.name == "bf16"


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (the first processor's `flags` line); empty where /proc/cpuinfo is not there."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def cpu_bf16_support(flags: set[str], capability: str) -> str:
    """The native bf16 feature this CPU has ('' if none), from its flags and torch's dispatch capability.

    torch's capability (`torch.backends.cpu.get_cpu_capability()`: DEFAULT, AVX2, AVX512, AMX…) says which kernels it
    dispatches to; the flags say what the CPU runs natively. Either one naming AMX or AVX-512-BF16 counts."""
    found = [f for f in NATIVE_BF16_FLAGS if f in flags]
    if found:
        return found[0]
    if "AMX" in capability.upper() or "BF16" in capability.upper():
        return f"torch capability {capability}"
    return ""


def auto_override() -> str:
    """What `$DISTILLERY_AUTO_PRECISION` makes `auto` pick ('' when unset); ValueError naming it when it is not a
    precision `auto` can resolve to."""
    value = os.environ.get(AUTO_ENV, "").strip()
    if value and value not in ("fp32", "bf16"):
        raise ValueError(f"${AUTO_ENV}={value!r}: use fp32 or bf16, or unset it to let the CPU decide")
    return value


def choose(requested: str, device_type: str, flags: set[str], capability: str) -> Precision:
    """The precision a run uses on `device_type` ('cpu' or 'cuda'), for `requested` in PRECISIONS."""
    if requested not in PRECISIONS:
        raise ValueError(f"--precision {requested!r} is not one of {', '.join(PRECISIONS)}")
    if device_type == "cuda":
        return Precision("bf16", "CUDA: bf16 weights and autocast")
    if requested != "auto":
        return Precision(requested, f"--precision {requested} (set by the run)")
    forced = auto_override()
    if forced:
        return Precision(forced, f"auto: ${AUTO_ENV}={forced}")
    native = cpu_bf16_support(flags, capability)
    if native:
        return Precision("bf16", f"auto: this CPU runs bf16 natively ({native})")
    return Precision("fp32", f"auto: no native bf16 on this CPU (torch capability {capability}; no amx_bf16 or "
                             f"avx512_bf16 flag): bf16 autocast would be emulated, slower than float32")  # fmt: skip


def detect(requested: str, device_type: str) -> Precision:
    """`choose` for the machine this runs on."""
    import torch

    return choose(requested, device_type, cpu_flags(), torch.backends.cpu.get_cpu_capability())


def agree(requested: str, workers: list[tuple[Precision, bool]]) -> Precision:
    """The one precision of a DDP group, from each worker's own pick (`detect`) and whether float32 weights fit its
    memory: every worker computes in it, so no float32 worker paces bf16 ones and the gradients averaged are computed
    alike. Pinned (`--precision fp32|bf16`): that. `auto`: the weakest member decides — bf16 when float32 does not fit
    some worker (every worker then loads bf16 weights, emulated where its CPU lacks bf16), else float32 when some
    worker's CPU lacks native bf16, else bf16."""
    if requested != "auto":
        return Precision(requested, f"--precision {requested} (set by the run), every worker")
    tight = [i for i, (_, fits) in enumerate(workers) if not fits]
    if tight:
        return Precision("bf16", f"auto, for the DDP group: float32 weights do not fit worker(s) {tight}; bf16 weights "
                                 f"on every worker of {len(workers)}")  # fmt: skip
    slow = [i for i, (own, _) in enumerate(workers) if own.name == "fp32"]
    if slow:
        return Precision("fp32", f"auto, for the DDP group: worker(s) {slow} lack native bf16 "
                                 f"({workers[slow[0]][0].reason.removeprefix('auto: ')}); float32 on every worker of "
                                 f"{len(workers)}")  # fmt: skip
    return Precision("bf16", f"auto, for the DDP group: all {len(workers)} workers run bf16 natively")
