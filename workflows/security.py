"""Who each pod is, which credentials reach it, and where it may write: one table each, read by `distill`, `retrain`
and `rayjob`, and by the tests that check the rendered YAML and the Roles in infra/rbac/ against them.

Identities (infra/rbac/):
- `STEPS` (`distillery-steps`): every container step. IRSA-annotated for S3 on EKS. Its API token is NOT mounted into
  the step's own container (`automountServiceAccountToken: false`): only Argo's executor containers (`init`, `wait`)
  get a token, through `executor.serviceAccountName` (workflowpod.go `setupServiceAccount`: it mounts the executor
  account's token Secret, `<name>.service-account-token`, into the executor containers only, and refuses
  automount false without it). What the executor does with it (v3.4+, workflow/executor/taskresult.go): create and
  patch the node's WorkflowTaskResult. The step's own code, which parses datasets, models and MLflow answers, has no
  Kubernetes identity at all.
- `SUBMITTER` (`distillery-submitter`): the resource templates (create/delete the RayJob, create the retrain
  Workflow), whose only container is argoexec. Its Role is exactly the verbs those manifests use
  (tests/test_rbac.py derives them from the rendered YAML).
- `RAY` (`distillery-ray`): the RayJob's head and worker pods. IRSA for S3; no token mounted, no Role: Ray needs no
  Kubernetes API (autoscaling is off).

Credentials are references only: a Secret's name and key, never a value. Every reference is `optional: true`, so a
cluster that needs none (EKS with IRSA, MLflow without auth, public base model and dataset repo) creates none and the
rendered templates stay the same; a platform engineer creates the Secrets that apply (README, "Secrets"). `SECRETS`
says which variables come from which Secret and key, `USERS` which pods get each: exactly the steps that talk to that
service (`serve`: the serving Deployments of workflows/serving.py).

Writable paths: every container runs with a read-only root filesystem. A step writes only to its output folder
(`/work/out`, an emptyDir that Argo uploads from) and to `SCRATCH_DIR` (an emptyDir at /tmp); `WRITABLE_ENV` points
every cache the steps' libraries keep (Hugging Face, torch/triton kernels, matplotlib, DVC's site cache, git/XDG
config) into it.
"""

from __future__ import annotations

from dataclasses import dataclass

STEPS = "distillery-steps"
SUBMITTER = "distillery-submitter"
RAY = "distillery-ray"
SERVICE_ACCOUNTS = (STEPS, SUBMITTER, RAY)
SCRATCH_VOLUME = "scratch"
SCRATCH_DIR = "/tmp"


@dataclass(frozen=True)
class SecretEnv:
    """One environment variable taken from one key of one Secret (`secretKeyRef`, optional)."""

    variable: str
    secret: str
    key: str


MLFLOW_SECRET = "distillery-mlflow"
S3_SECRET = "distillery-s3"
HUB_SECRET = "distillery-hf"
GIT_SECRET = "distillery-git"
TEACHER_SECRET = "distillery-teacher"
SERVE_TOKENS_SECRET = "distillery-serve-tokens"

# Which variables each credential sets, from which Secret and key.
SECRETS: dict[str, tuple[SecretEnv, ...]] = {
    # MLflow over HTTPS: a bearer token, or basic auth (MLflow's client reads these; set one or the other).
    "mlflow": (
        SecretEnv("MLFLOW_TRACKING_TOKEN", MLFLOW_SECRET, "token"),
        SecretEnv("MLFLOW_TRACKING_USERNAME", MLFLOW_SECRET, "username"),
        SecretEnv("MLFLOW_TRACKING_PASSWORD", MLFLOW_SECRET, "password"),
    ),
    # S3 at home (no IRSA there): static keys and the endpoint of the S3-compatible store.
    "s3": tuple(
        SecretEnv(v, S3_SECRET, v)
        for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")
    ),
    # A gated or private base model on the Hugging Face hub.
    "model-hub": (SecretEnv("HF_TOKEN", HUB_SECRET, "token"),),
    # A private dataset repository: a file, not variables (GIT_FILES).
    "git": (),
    # A hosted teacher's API key (sent as a bearer token, only after the terms gate let the teacher through).
    "teacher": (SecretEnv("TEACHER_API_KEY", TEACHER_SECRET, "api-key"),),
    # The home server's bearer tokens: files, not variables (SERVE_TOKEN_FILES).
    "serve-tokens": (),
}

# The pods each credential reaches (template names; `train-ray` stands for the RayJob's head and workers), and why.
USERS: dict[str, tuple[str, ...]] = {
    # the steps that call MLflow: the champion's scores and files (evaluate's shards; its gather takes the tracking
    # URI too, as every evaluate does), the new version, the aliases, the triggers
    "mlflow": ("evaluate-shard-cpu", "evaluate-shard-gpu", "evaluate", "register", "propose", "check-triggers",
               "promote", "serve"),
    # the steps that read or write S3 themselves (DVC remote, checkpoints, caches, MLflow artifacts; build-dataset's
    # documents, teacher cache and dvc push; the serving pods' GGUF download when MLflow does not proxy artifacts)
    "s3": ("fetch-dataset", "train-gpu", "train-cpu", "train-ray", "convert-gguf", "evaluate-shard-cpu",
           "evaluate-shard-gpu", "register", "check-triggers", "ingest", "teacher", "publish", "serve"),
    # the steps that download the base model from the hub
    "model-hub": ("preflight", "train-gpu", "train-cpu", "train-ray", "convert-gguf"),
    # the steps that read the dataset repository (the retrain check counts its new feedback rows) or push to it
    "git": ("fetch-dataset", "check-triggers", "publish"),
    # build-dataset's teacher step, the only one that calls a teacher
    "teacher": ("teacher",),
    # the serving pods, which check every request's bearer token (steps/serve/front.py)
    "serve-tokens": ("serve",),
}  # fmt: skip


@dataclass(frozen=True)
class SecretFile:
    """One key of one Secret, mounted read-only as a file (an optional secret volume)."""

    secret: str
    key: str
    directory: str
    file: str


# A private dataset repository over HTTPS: a git config file whose `[http "https://<host>/"] extraHeader =
# Authorization: Basic …` git and dulwich (DVC's git client) read from $XDG_CONFIG_HOME/git/config. Scoped to the
# repository's URL, so the header goes to that host only, whatever repository a tag names. (dulwich ignores git's
# GIT_CONFIG_COUNT variables, so not those.)
CONFIG_HOME = f"{SCRATCH_DIR}/config"  # $XDG_CONFIG_HOME (WRITABLE_ENV)
GIT_FILES = (SecretFile(GIT_SECRET, "gitconfig", f"{CONFIG_HOME}/git", "config"),)
# The home server's bearer tokens, one a line: `clients` may ask, `operators` may also pin a side. Without the Secret
# the files are absent and serve refuses to start (it never answers strangers for want of a file).
SERVE_TOKENS_DIR = "/var/run/secrets/distillery-serve"
SERVE_TOKEN_FILES = tuple(SecretFile(SERVE_TOKENS_SECRET, k, SERVE_TOKENS_DIR, k) for k in ("clients", "operators"))
FILES: dict[str, tuple[SecretFile, ...]] = {"git": GIT_FILES, "serve-tokens": SERVE_TOKEN_FILES}


def secret_volumes(step: str) -> tuple[list[dict], list[dict]]:
    """(volumes, volume mounts), Kubernetes dicts, for the credential files `step` may use."""
    files = [f for credential, users in USERS.items() if step in users for f in FILES.get(credential, ())]
    by_secret: dict[tuple[str, str], list[SecretFile]] = {}  # one volume per Secret (and folder), all its keys
    for f in files:
        by_secret.setdefault((f.secret, f.directory), []).append(f)
    volumes = [
        {"name": f"secret-{secret}", "secret": {"secretName": secret, "optional": True,
                                                "items": [{"key": f.key, "path": f.file} for f in group]}}
        for (secret, _), group in by_secret.items()
    ]  # fmt: skip
    mounts = [{"name": f"secret-{secret}", "mountPath": d, "readOnly": True} for secret, d in by_secret]
    return volumes, mounts


def secret_env(step: str) -> list[dict]:
    """The `env` entries (Kubernetes dicts) with every credential `step` may use, each an optional secretKeyRef."""
    return [
        {"name": e.variable, "valueFrom": {"secretKeyRef": {"name": e.secret, "key": e.key, "optional": True}}}
        for credential, users in USERS.items()
        if step in users
        for e in SECRETS[credential]
    ]


# Every place the steps' libraries write outside the output folder, moved into the scratch emptyDir. HOME too: git,
# dulwich and pip look there, and the image's home is on the read-only root.
WRITABLE_ENV: dict[str, str] = {
    "TMPDIR": SCRATCH_DIR,
    "HOME": f"{SCRATCH_DIR}/home",
    "XDG_CACHE_HOME": f"{SCRATCH_DIR}/cache",
    "XDG_CONFIG_HOME": CONFIG_HOME,  # where GIT_FILES are mounted
    "HF_HOME": f"{SCRATCH_DIR}/hf",  # the images set /work/.hf, on the root filesystem
    "TRITON_CACHE_DIR": f"{SCRATCH_DIR}/triton",
    "TORCHINDUCTOR_CACHE_DIR": f"{SCRATCH_DIR}/torchinductor",
    "MPLCONFIGDIR": f"{SCRATCH_DIR}/matplotlib",
    "DVC_SITE_CACHE_DIR": f"{SCRATCH_DIR}/dvc-site",
    "DVC_GLOBAL_CONFIG_DIR": f"{CONFIG_HOME}/dvc",
    "NUMBA_CACHE_DIR": f"{SCRATCH_DIR}/numba",
}


def writable_env() -> list[dict]:
    return [{"name": k, "value": v} for k, v in WRITABLE_ENV.items()]
