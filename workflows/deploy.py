"""What only Argo needs to run a stage: one `Deploy` row per stage of every pipeline (`steps.pipeline.PIPELINES`).

A stage's runner-neutral facts (its command line, parameters, folders, the files a parameter names, when it runs) are
its `steps.pipeline.Stage`; what the cluster adds — the floor of what each of its templates asks a node for, whether
its output lives at a fixed key of the run, which served GGUFs it downloads, the caches it keeps across runs, the
service account its pods run under, and what kind of template it is — is its row here. A new stage is its module, one
`Stage` and one row here (and, if its pods use a credential, a place among that credential's users: security.USERS,
which also passes it the flag of a credential file); tests/test_workflows.py holds every stage to exactly one row, and
no other table to naming a stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hera.workflows import models as m

from steps import sizing
from workflows import security
from workflows.pods import fixed_resources

# The default artifact repository's bucket (infra/artifact-repository.yaml; a test keeps them equal): key-only
# artifacts land there, so the steps that read and write S3 themselves must name the same bucket.
BUCKET = "distillery-artifacts"
# evaluate's shard templates: evaluate-shard-cpu, evaluate-shard-gpu (one runs, by backend); workflows/distill.py
SHARD = "evaluate-shard"
# The served GGUFs evaluate's shards generate with (its gather only judges the shards' answers).
SHARD_GGUF_READS = ("candidate-gguf", "base-gguf")
# The shards keep no generations between runs: every contender is generated every run. A shared prefix of kept answers
# is written by the steps role, and kept answers decide the comparison (weak ones for a rival, strong ones for the
# candidate: issue 37); evaluate refuses an s3:// generation cache. Each shard signs its answers with the shard key
# (steps/core/verdict.py SHARD; security.USERS "shard-key", `security.file_args`), which its gather verifies.
SHARD_ARGS = ("--generation-cache", "")

# How a stage becomes templates (workflows/distill.py):
# - container: one container template named as the stage;
# - backends: one template per train backend (train-gpu, train-cpu pods; train-ray, a RayJob), the `train-backend`
#   parameter picking one by a `when` on each; its readers wait for whichever ran;
# - fanned-out: shard pods (SHARD-cpu or SHARD-gpu, by backend) in lanes, then the stage's own template gathers them.
Kind = Literal["container", "backends", "fanned-out"]


@dataclass(frozen=True)
class Deploy:
    # What each of its templates needs from a node at least, by template name. The heavy ones (sizing.POD_PATCH_STEPS)
    # get their memory and disk from preflight for the run's base model (a podSpecPatch): these are their floors and
    # CPU; the light ones ask for fixed sizes, disk included (`fixed_resources`: small, whatever the base model).
    resources: dict[str, m.ResourceRequirements]
    kind: Kind = "container"
    # Its output at a fixed key of the run (`distill.run_key(output)`), whichever template wrote it: the Ray job reads
    # the dataset there, readers find the adapter there whichever backend ran, the GGUF folder's readers take only the
    # files they read.
    keyed: bool = False
    # Its readers take its output at that key themselves rather than as an argument from its task: the adapter (three
    # train tasks, one ran) and the KD targets (their task may be skipped; then the optional input is absent).
    read_by_key: bool = False
    # The served GGUFs (convert-gguf's output parameters naming them) it downloads besides the reports
    # (`steps.gguf.report.REPORT_FILES`); F16 and the rest of the ladder stay in S3 (GBs not moved for a 3B base).
    gguf_reads: tuple[str, ...] = ()
    # (flag, location) of work that is the same in every run on a base, kept across runs, unlike the run's prefix
    # (sealed folders, steps/core/sealed.py).
    shared_cache: tuple[str, str] | None = None
    # The service account its pods run under instead of the workflow's (security.STEPS); Argo's executor containers
    # keep the workflow's executor account.
    account: str | None = None


DEPLOY: dict[str, Deploy] = {
    # distill
    # Disk: the dataset's JSONL files (text) and the git clone DVC reads them through.
    "fetch-dataset": Deploy({"fetch-dataset": fixed_resources("250m", "512Mi", "1Gi", disk_gib=4)}, keyed=True),
    # Disk: the base's config and tokenizer, a vocabulary-only GGUF for the tokenizer probe.
    "preflight": Deploy({"preflight": fixed_resources("500m", "1Gi", "2Gi", disk_gib=2)}),
    # The default teacher (135M) in llama.cpp with every position's logits: well under 1 GiB; a larger teacher of the
    # student's family (a 1.7B at Q8_0: ~2 GiB mapped) fits the limit. Not sized by preflight, which knows no teacher.
    # Disk: the train split, the base's tokenizer, the sidecar; the default teacher's GGUF is in the image.
    "kd-targets": Deploy({"kd-targets": fixed_resources("2", "4Gi", "6Gi", disk_gib=4)}, keyed=True, read_by_key=True),
    "train": Deploy(
        {
            "train-cpu": m.ResourceRequirements(
                requests={"cpu": str(sizing.TRAIN_CPU_CPUS), "memory": "8Gi"}, limits={"memory": "12Gi"}
            ),
            "train-gpu": m.ResourceRequirements(
                requests={"cpu": "4", "memory": "24Gi", "nvidia.com/gpu": "1"},
                limits={"memory": "32Gi", "nvidia.com/gpu": "1"},
            ),
        },
        kind="backends",
        keyed=True,
        read_by_key=True,
    ),
    # convert-gguf's base-model conversions, keyed by the base's files and the converter, so the base is not converted
    # again. Its GGUF is judged by the bytes evaluate hashes and register pins per base revision (steps/register.py
    # `check_base_pin`), so a weaker file written there is refused, not judged as the base.
    "convert-gguf": Deploy(
        {"convert-gguf": m.ResourceRequirements(requests={"cpu": "2", "memory": "8Gi"}, limits={"memory": "12Gi"})},
        keyed=True,
        shared_cache=("--base-cache", f"s3://{BUCKET}/cache/base-gguf"),
    ),
    # The gather judges and decides (the bootstrap, the error-rate simulations) and generates nothing; the shards
    # generate, every contender every run (SHARD_ARGS). The gather verifies every shard's signature (the shards' public
    # key) and signs the decision with the gate's key (steps/core/verdict.py; the files: security.USERS).
    "evaluate": Deploy(
        {
            "evaluate": m.ResourceRequirements(requests={"cpu": "1", "memory": "2Gi"}, limits={"memory": "4Gi"}),
            f"{SHARD}-cpu": m.ResourceRequirements(requests={"cpu": "4", "memory": "4Gi"}, limits={"memory": "6Gi"}),
            f"{SHARD}-gpu": m.ResourceRequirements(
                requests={"cpu": "4", "memory": "4Gi", "nvidia.com/gpu": "1"},
                limits={"memory": "6Gi", "nvidia.com/gpu": "1"},
            ),
        },
        kind="fanned-out",
    ),
    "register": Deploy(
        {"register": m.ResourceRequirements(requests={"cpu": "500m", "memory": "1Gi"}, limits={"memory": "2Gi"})},
        gguf_reads=("candidate-gguf",),
        account=security.REGISTER,  # the one role that writes MLflow's artifact root (model versions, decisions)
    ),
    "propose": Deploy({"propose": fixed_resources("250m", "512Mi", "1Gi", disk_gib=1)}),  # disk: MLflow answers only
    # Disk: the adapter's files (LoRA: tens to hundreds of MB), a one-branch depth-1 clone, the card.
    "push-adapter": Deploy({"push-adapter": fixed_resources("250m", "512Mi", "1Gi", disk_gib=4)}),
    # build-dataset
    # Disk: the documents downloaded from the S3 prefix (PDFs) and their extracted text.
    "ingest": Deploy({"ingest": fixed_resources("1", "2Gi", "4Gi", disk_gib=8)}),
    # Disk: the feedback file and its merged rows.
    "feedback": Deploy({"feedback": fixed_resources("250m", "512Mi", "1Gi", disk_gib=1)}),
    # A local open-weights teacher runs in this pod (llama.cpp's server); a remote one needs little. Its answers are
    # kept across runs by document, teacher and prompt (a rebuild with one new document sends one request). Disk: the
    # chunks, the answers and the cache's copies; the open-weights teacher's GGUF is in the image.
    "teacher": Deploy(
        {"teacher": fixed_resources("4", "4Gi", "8Gi", disk_gib=4)},
        shared_cache=("--cache", f"s3://{BUCKET}/cache/teacher"),
    ),
    # Disk: the rows, twice (kept and dropped).
    "filter-split": Deploy({"filter-split": fixed_resources("500m", "1Gi", "2Gi", disk_gib=2)}),
    # Disk: a clone of the dataset repository, the split files and DVC's cache of them.
    "publish": Deploy({"publish": fixed_resources("500m", "1Gi", "2Gi", disk_gib=4)}),
}


def account(template: str) -> str:
    """The service account the pod of container template `template` runs under: its stage's (`Deploy.account`), else
    the steps' (security.STEPS)."""
    return next((d.account for d in DEPLOY.values() if template in d.resources and d.account), security.STEPS)
