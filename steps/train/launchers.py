"""The launchers of `train_loop`: in this process (cpu, gpu; `train_here`) and on Ray Train (`train_ray`, one
`ray_worker` per worker, DDP over Gloo, checkpoints through Ray's storage path)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from steps.contract.threads import cpu_threads
from steps.core import trust
from steps.core.examples import encode_rows
from steps.core.io import is_uri
from steps.train.budget import base_shape, choose, fits
from steps.train.checkpoints import KEEP_CHECKPOINTS, DirCheckpoints, RayCheckpoints
from steps.train.config import TrainConfig
from steps.train.gpu import base_parameters
from steps.train.kd import loss_hook
from steps.train.loop import stop_on_sigterm, train_loop
from steps.train.model import build_model, pad_id_of, use_gradient_checkpointing
from steps.train.precision import agree, detect

# OpenMP threads spin at barriers by default: the fastest on CPUs the step has to itself (the pods request whole CPUs),
# but beside another busy process a descheduled thread stalls the others. Measured on this 2-core machine
# (benchmarks/train_throughput.py): 6 tiny-model steps took 26.5 s spinning vs 2.8 s with OMP_WAIT_POLICY=PASSIVE
# beside one niced process, while PASSIVE costs 10-25 % on an idle machine. So the pods (whole CPUs requested) keep
# the default, and the runs on a developer's machine set PASSIVE for every step (scripts/local_env.sh, llama.cpp's
# OpenMP threads too); a value set for the step is handed on to the Ray workers.
WAIT_POLICY = {k: v for k, v in os.environ.items() if k == "OMP_WAIT_POLICY"}


class TrainingFailed(Exception):
    """Training did not finish; nothing was written to --out."""


def train_here(
    cfg: TrainConfig, rows: list[dict], checkpoints: DirCheckpoints, kd_targets: dict | None = None
) -> tuple[str, float, int]:
    """The in-process launcher (cpu, gpu): returns the device's name, its peak allocated memory in GiB (0 on CPU) and
    the base's parameter count (for MFU). `kd_targets`: the teacher's top-k for `rows` (kd_sidecar.load_targets) when
    --kd-weight > 0."""
    import torch

    device = torch.device("cuda" if cfg.train_backend == "gpu" else "cpu")
    torch.set_num_threads(cpu_threads(cfg.threads))
    precision, micro = choose(cfg, base_shape(cfg), detect(cfg.precision, device.type),
                              device="gpu" if device.type == "cuda" else "cpu")  # fmt: skip
    model, tokenizer = _model(cfg, device, precision.name, micro.checkpointing)
    examples = encode_rows(tokenizer, rows, cfg.max_seq_len)
    kd = loss_hook(cfg, tokenizer, examples, kd_targets)
    with stop_on_sigterm():
        train_loop(model, examples, cfg, pad_id_of(tokenizer), checkpoints, kd=kd, micro=micro, precision=precision)
    if device.type == "cpu":
        return "cpu", 0.0, base_parameters(model)
    peak = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    return torch.cuda.get_device_name(device), peak, base_parameters(model)


def _model(cfg: TrainConfig, device: Any, precision: str, checkpointing: bool) -> tuple[Any, Any]:
    """build_model, with gradient checkpointing switched on when the process's plan chose it."""
    model, tokenizer = build_model(cfg, device, precision)
    if checkpointing:
        use_gradient_checkpointing(model)
    return model, tokenizer


def ray_worker(config: dict) -> None:
    """One Ray Train worker: the same model, examples and `train_loop`, DDP over Gloo."""
    import ray.train
    import torch
    from ray.train.torch import get_device, prepare_model

    # A KubeRay worker pod's processes are Ray's, not the step's: this worker trusts its own pod's private CA (the hub
    # mirror; S3, where ray_storage's filesystem looks for the bundle at the path it has on every pod) before it
    # touches either. (Not Ray's worker_process_setup_hook: it runs before the driver's folder is on sys.path.)
    trust.install()
    cfg = TrainConfig(**config["cfg"])
    torch.set_num_threads(config["threads"])  # Ray sets OMP_NUM_THREADS=1 per worker; the thread count is ours
    context = ray.train.get_context()
    device = get_device()  # this worker's GPU with --ray-gpu, else the CPU
    shape = base_shape(cfg)
    # A KubeRay worker pod is one node: the workers on this node share its memory limit.
    where = {"device": "gpu" if device.type == "cuda" else "ray", "world_size": context.get_world_size(),
             "pod_workers": context.get_local_world_size()}  # fmt: skip
    own = detect(cfg.precision, device.type)
    if device.type == "cpu":  # one precision for the DDP group, the weakest worker's (CUDA is always bf16)
        mine = (own, fits(cfg, shape, "fp32", **where))
        everyone: list[Any] = [mine]
        if torch.distributed.is_initialized():  # Ray Train's TorchConfig set the Gloo group up before this function
            everyone = [None] * context.get_world_size()
            torch.distributed.all_gather_object(everyone, mine)
        own = agree(cfg.precision, everyone)
    precision, micro = choose(cfg, shape, own, **where)
    model, tokenizer = _model(cfg, device, precision.name, micro.checkpointing)
    examples = encode_rows(tokenizer, config["rows"], cfg.max_seq_len)
    kd = loss_hook(cfg, tokenizer, examples, config["kd"])
    model = prepare_model(model)
    train_loop(
        model,
        examples,
        cfg,
        pad_id_of(tokenizer),
        RayCheckpoints(),
        rank=context.get_world_rank(),
        world_size=context.get_world_size(),
        kd=kd,
        micro=micro,
        precision=precision,
    )


def ray_storage(location: str) -> tuple[str, Any]:
    """Ray Train's storage path and filesystem: an absolute local folder, or S3 (honouring AWS_ENDPOINT_URL, and
    AWS_CA_BUNDLE as botocore does: pyarrow reads no variable once its S3 client has started in the process)."""
    if not is_uri(location):
        return str(Path(location).resolve()), None
    if not location.startswith("s3://"):
        raise ValueError(f"--checkpoint-dir {location}: only local folders and s3:// URIs are supported")
    from pyarrow import fs

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    kwargs: dict[str, Any] = {"region": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}
    if endpoint:
        kwargs["endpoint_override"] = endpoint
        kwargs["scheme"] = "https" if endpoint.startswith("https") else "http"
    if os.environ.get("AWS_CA_BUNDLE"):  # the private CA's bundle (steps/core/trust.py), on every pod at the same path
        kwargs["tls_ca_file_path"] = os.environ["AWS_CA_BUNDLE"]
    return location[len("s3://") :].rstrip("/"), fs.S3FileSystem(**kwargs)


def scaling(cfg: TrainConfig, threads: int) -> dict[str, Any]:
    """Ray Train's ScalingConfig and TorchConfig arguments: `cfg.ray_workers` workers, all on CPUs (Gloo, `threads`
    each) or, with --ray-gpu, all on one GPU each (NCCL). Never a mix: DDP's all-reduce runs at the pace of the
    slowest worker, and one process group has one backend (check-parameters refuses the mixed cluster)."""
    resources: dict[str, float] = {"CPU": threads}
    if cfg.ray_gpu:
        resources["GPU"] = 1
    return {
        "scaling": {"num_workers": cfg.ray_workers, "use_gpu": cfg.ray_gpu, "resources_per_worker": resources},
        "torch": {"backend": "nccl" if cfg.ray_gpu else "gloo"},
    }


def train_ray(cfg: TrainConfig, rows: list[dict], storage: str, dest: Path, kd_targets: dict | None = None) -> str:
    """The Ray Train launcher: `cfg.ray_workers` CPU (or, with --ray-gpu, GPU) workers; copies the final checkpoint
    into `dest`."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    threads = cfg.threads or max(1, cpu_threads() // cfg.ray_workers)
    plan = scaling(cfg, threads)
    started_here = not ray.is_initialized()
    if started_here:
        if cfg.ray_address:
            ray.init(address=cfg.ray_address, logging_level="WARNING")
        else:  # a local cluster just big enough: the workers' CPUs, no dashboard
            ray.init(num_cpus=cfg.ray_workers * threads, logging_level="WARNING")
    if Path(cfg.base_model).exists():  # Ray workers do not run in this folder: a relative path would miss
        cfg = replace(cfg, base_model=str(Path(cfg.base_model).resolve()))
    storage_path, filesystem = ray_storage(storage)
    # The run's name is stable across restarts of this command (workflow uid on Argo), so Ray Train finds the
    # earlier attempt's checkpoints in the storage path and `get_checkpoint()` resumes from the latest.
    digest = hashlib.sha256(json.dumps([asdict(cfg), rows], default=str).encode()).hexdigest()
    name = cfg.run_id or f"train-{digest[:12]}"
    trainer = TorchTrainer(
        ray_worker,
        train_loop_config={"cfg": asdict(cfg), "rows": rows, "threads": threads, "kd": kd_targets},
        scaling_config=ScalingConfig(**plan["scaling"]),
        torch_config=TorchConfig(**plan["torch"]),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            storage_filesystem=filesystem,
            failure_config=FailureConfig(max_failures=cfg.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=KEEP_CHECKPOINTS),
            worker_runtime_env={"env_vars": WAIT_POLICY},
        ),
    )
    try:
        result = trainer.fit()
        with result.checkpoint.as_directory() as folder:
            shutil.copytree(folder, dest, dirs_exist_ok=True)
        # The adapter is out of Ray's hands now: locally a rerun is a new run, not a resume of this one. On S3 (the
        # cluster's run prefix) the checkpoints stay until the adapter is safely uploaded and beyond (see run()).
        if filesystem is None:
            shutil.rmtree(Path(storage_path) / name, ignore_errors=True)
            with contextlib.suppress(OSError):  # the storage folder itself, when this run was all it held
                Path(storage_path).rmdir()
    except ray.train.TrainingFailedError as e:
        raise TrainingFailed(
            f"Ray training failed after {cfg.max_failures} restart(s) from its checkpoints: {e}. Its checkpoints are "
            f"kept under {storage}/{name}: rerun the same command to resume"
        ) from e
    finally:
        if started_here:
            ray.shutdown()
    return f"ray: {cfg.ray_workers} {'GPU' if cfg.ray_gpu else 'CPU'} workers x {threads} threads"
