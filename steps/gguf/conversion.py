"""HF folder to GGUF with llama.cpp's own tools: its converter script (`convert_hf_dir`, F16) and its quantiser
(`quantize`, the quantisations of steps/gguf/quants.py). convert-gguf (steps/convert_gguf/) runs them; whether the
result is the same model is steps/gguf/parity.py's question.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from steps.gguf.quants import QUANTIZATIONS, QUANTS


def ftype(quantization: str) -> int:
    """llama.cpp's file type (enum llama_ftype) for `quantization`, one the ladder may hold (steps/gguf/quants.py)."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"{quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    return QUANTS[quantization].ftype


def release_memory() -> None:
    """Give the memory this process freed back to the system before something large starts (llama.cpp mapping a
    GGUF, the converter's process): glibc keeps freed heap pages (the tensors of a streamed forward, a few MB each)
    resident until trimmed, and they would sit under the next phase's peak."""
    import contextlib
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim this way
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def convert_hf_dir(converter_dir: Path, hf_dir: Path, outfile: Path, outtype: str = "f16") -> None:
    script = converter_dir / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise FileNotFoundError(
            f"{script} not found: llama.cpp's converter is fetched at install time; "
            "run scripts/install_llama_cpp.sh or set --converter-dir / DISTILLERY_LLAMA_CPP"
        )
    release_memory()
    proc = subprocess.run(
        [sys.executable, str(script), str(hf_dir), "--outfile", str(outfile), "--outtype", outtype],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"llama.cpp's converter failed on {hf_dir}:\n{proc.stderr[-4000:]}")


@contextmanager
def _native_output_to(log: Path) -> Iterator[None]:
    """Send what C code prints (llama.cpp logs a line per tensor) to `log` instead of the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with log.open("ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def quantize(src: Path, dst: Path, quantization: str, threads: int) -> None:
    """llama.cpp's own quantiser (llama_model_quantize), as `llama-quantize` runs it."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype(quantization)
    params.nthread = threads
    log = dst.with_suffix(".quantize.log")
    release_memory()
    with _native_output_to(log):
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    text = log.read_text(errors="replace")
    log.unlink()
    if rc != 0 or not dst.is_file():
        raise RuntimeError(f"llama.cpp could not quantise {src} to {quantization} (return code {rc}):\n{text[-3000:]}")
