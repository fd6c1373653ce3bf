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
- `REGISTER` (`distillery-register`): the register step's pod, the only holder of the IAM role that may write MLflow's
  artifact root (model versions, the gate's decisions; scripts/render_iam.py). Its Argo executor containers use the
  `STEPS` account's token like every step (the workflow's `executor.serviceAccountName`); no token of its own.
- `SERVE` (`distillery-serve`): the serving Deployments (workflows/serving.py): IRSA to read MLflow's artifact root
  only; no token, no Role.

Credentials are references only: a Secret's name and key, never a value. Every reference is `optional: true`, so a
cluster that needs none (EKS with IRSA, MLflow without auth, public base model and dataset repo) creates none and the
rendered templates stay the same; a platform engineer creates the Secrets that apply (README, "Secrets"). `SECRETS`
says which variables come from which Secret and key, `USERS` which pods get each: exactly the steps that talk to that
service (`serve`: the serving Deployments of workflows/serving.py).

A private CA: the optional ConfigMap `trust.CONFIGMAP` (steps/core/trust.py), mounted read-only by `trust_volume` and
`trust_mount` into every pod that runs the steps' code — every step pod, the Ray head and workers, the serving pods —
whose `install()` trusts it besides the public CAs. Absent, nothing changes.

Writable paths: every container runs with a read-only root filesystem. A step writes only to its output folder
(`/work/out`, an emptyDir that Argo uploads from) and to `SCRATCH_DIR` (an emptyDir at /tmp); `WRITABLE_ENV` points
every cache the steps' libraries keep (Hugging Face, torch/triton kernels, matplotlib, DVC's site cache, git/XDG
config) into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from steps.core import trust, verdict

STEPS = "distillery-steps"
SUBMITTER = "distillery-submitter"
RAY = "distillery-ray"
REGISTER = "distillery-register"
SERVE = "distillery-serve"
SERVICE_ACCOUNTS = (STEPS, SUBMITTER, RAY, REGISTER, SERVE)
SCRATCH_VOLUME = "scratch"
SCRATCH_DIR = "/tmp"


@dataclass(frozen=True)
class SecretEnv:
    """One environment variable taken from one key of one Secret (`secretKeyRef`, optional)."""

    variable: str
    secret: str
    key: str


MLFLOW_SECRET = "distillery-mlflow"  # an MLflow user that may edit the registered model (versions, tags, aliases)
MLFLOW_READ_SECRET = "distillery-mlflow-read"  # an MLflow user that may only read it
S3_SECRET = "distillery-s3"
HUB_SECRET = "distillery-hf"
GIT_SECRET = "distillery-git"
TEACHER_SECRET = "distillery-teacher"
SERVE_TOKENS_SECRET = "distillery-serve-tokens"
GITEA_SECRET = "distillery-gitea"

# Which variables each credential sets, from which Secret and key.
SECRETS: dict[str, tuple[SecretEnv, ...]] = {
    # MLflow over HTTPS: a bearer token, or basic auth (MLflow's client reads these; set one or the other).
    "mlflow": (
        SecretEnv("MLFLOW_TRACKING_TOKEN", MLFLOW_SECRET, "token"),
        SecretEnv("MLFLOW_TRACKING_USERNAME", MLFLOW_SECRET, "username"),
        SecretEnv("MLFLOW_TRACKING_PASSWORD", MLFLOW_SECRET, "password"),
    ),
    # The same variables, from a read-only MLflow user: the steps that only read the registry.
    "mlflow-read": (
        SecretEnv("MLFLOW_TRACKING_TOKEN", MLFLOW_READ_SECRET, "token"),
        SecretEnv("MLFLOW_TRACKING_USERNAME", MLFLOW_READ_SECRET, "username"),
        SecretEnv("MLFLOW_TRACKING_PASSWORD", MLFLOW_READ_SECRET, "password"),
    ),
    # S3 at home (no IRSA there): static keys and the endpoint of the S3-compatible store.
    "s3": tuple(
        SecretEnv(v, S3_SECRET, v)
        for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")
    ),
    # A gated or private base model on the Hugging Face hub: a file (HUB_FILES, HF_TOKEN_PATH names it), except in the
    # Ray pods, which may mount no Secret (NO_SECRET_VOLUMES) and take it as this variable.
    "model-hub": (SecretEnv("HF_TOKEN", HUB_SECRET, "token"),),
    # A private dataset repository: a file, not variables (GIT_FILES).
    "git": (),
    # A hosted teacher's API key: a file, not a variable (TEACHER_FILES), so the teacher step's child processes
    # (llama.cpp's server for a local teacher) never inherit it.
    "teacher": (),
    # The home server's bearer tokens: files, not variables (SERVE_TOKEN_FILES).
    "serve-tokens": (),
    # The adapters repository's write token: a file, not a variable (GITEA_FILES).
    "gitea": (),
    # The gate's signing key and its public half: files (VERDICT_FILES), never variables.
    "verdict-key": (),
    "verdict-public": (),
    # The shards' signing key and its public half (steps/core/verdict.py SHARD): files (VERDICT_FILES) too.
    "shard-key": (),
    "shard-public": (),
}

# The pods each credential reaches (template names; `train-ray` stands for the RayJob's head and workers), and why.
USERS: dict[str, tuple[str, ...]] = {
    # the steps that write to MLflow's registry: the new version (register), the challenger alias (propose), the
    # champion alias (promote), the trigger's record on the champion (check-triggers)
    "mlflow": ("register", "propose", "check-triggers", "promote"),
    # the steps that only read it: the champion's scores and files (evaluate's shards; its gather takes the tracking
    # URI too, as every evaluate does), the version's lineage (push-adapter), the alias served (serve). A stolen
    # token of theirs cannot move an alias or rewrite gguf.sha256 (issue 37)
    "mlflow-read": ("evaluate-shard-cpu", "evaluate-shard-gpu", "evaluate", "push-adapter", "serve"),
    # the steps that read or write S3 themselves (DVC remote, checkpoints, caches, MLflow artifacts; build-dataset's
    # documents, feedback file, teacher cache and dvc push; the serving pods' GGUF download when MLflow does not proxy
    # artifacts)
    "s3": ("fetch-dataset", "train-gpu", "train-cpu", "train-ray", "convert-gguf", "evaluate-shard-cpu",
           "evaluate-shard-gpu", "register", "check-triggers", "ingest", "feedback", "teacher", "publish", "serve"),
    # the steps that download the base model (or, kd-targets and build-dataset's ingest, its tokenizer) from the hub:
    # a gated base (Llama 3.2) needs the token, a cluster without huggingface.co the mirror (SETTINGS)
    "model-hub": ("preflight", "kd-targets", "train-gpu", "train-cpu", "train-ray", "convert-gguf", "ingest"),
    # the steps that read the dataset repository (the retrain check counts its new feedback rows) or push to it
    "git": ("fetch-dataset", "check-triggers", "publish"),
    # build-dataset's teacher step, the only one that calls a teacher
    "teacher": ("teacher",),
    # the serving pods, which check every request's bearer token (steps/serve/front.py)
    "serve-tokens": ("serve",),
    # push-adapter, the only step that writes to the adapters repository
    "gitea": ("push-adapter",),
    # evaluate's gather (the template `evaluate`), the one step that decides, signs its decision; not its shards,
    # which run llama.cpp on files other roles write (steps/core/verdict.py)
    "verdict-key": ("evaluate",),
    # the steps that act on the decision verify it
    "verdict-public": ("register", "propose"),
    # evaluate's shards sign their answers (shard.json) with a key of their own, not the decision's: what takes over a
    # shard through llama.cpp can sign answers, never a decision
    "shard-key": ("evaluate-shard-cpu", "evaluate-shard-gpu"),
    # the gather verifies every shard before it decides on its answers
    "shard-public": ("evaluate",),
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
# The adapters repository's token (Gitea), read by push-adapter from the file `--token-file` names (GITEA_TOKEN_FILE):
# not in the step's environment, where git and every other child process would inherit it. Without the Secret the
# file is absent and push-adapter, when adapter-repo is set, stops naming the Secret.
GITEA_DIR = "/var/run/secrets/distillery-gitea"
GITEA_FILES = (SecretFile(GITEA_SECRET, "token", GITEA_DIR, "token"),)
GITEA_TOKEN_FILE = f"{GITEA_DIR}/token"
# A hosted teacher's API key (sent as a bearer token, only after the terms gate let the teacher through), read from
# the file TEACHER_API_KEY_FILE names (steps/teacher.py).
TEACHER_DIR = "/var/run/secrets/distillery-teacher"
TEACHER_FILES = (SecretFile(TEACHER_SECRET, "api-key", TEACHER_DIR, "api-key"),)
# The hub token, read by huggingface_hub from the file HF_TOKEN_PATH names.
HUB_DIR = "/var/run/secrets/distillery-hf"
HUB_FILES = (SecretFile(HUB_SECRET, "token", HUB_DIR, "token"),)
# The gate's Ed25519 key (steps/core/verdict.py): the private half to the deciding step, the public half to the steps
# that act on its decision, each at the path the step's flag names (FILE_FLAGS, `file_args`).
# The shards' key pair the same way: the private half to the shard pods, the public half to the gather.
VERDICT_FILES = {
    f"{name}-{half}": (SecretFile(secret, f"{kind}-key", signer.key_dir, PurePosixPath(path).name),)
    for name, signer in (("verdict", verdict.DECISION), ("shard", verdict.SHARD))
    for half, kind, secret, path in (("key", "private", signer.private_secret, signer.private_file),
                                     ("public", "public", signer.public_secret, signer.public_file))
}  # fmt: skip
FILES: dict[str, tuple[SecretFile, ...]] = {
    **VERDICT_FILES,
    "git": GIT_FILES,
    "serve-tokens": SERVE_TOKEN_FILES,
    "teacher": TEACHER_FILES,
    "model-hub": HUB_FILES,
    "gitea": GITEA_FILES,
}
# The flag each user of a credential file is given it by (the steps' flags default to nothing: the cluster names the
# file it mounts, FILES): `file_args` gives a pod the flags of the files it may use, so a stage that uses one is
# written once, in USERS.
FILE_FLAGS: dict[str, str] = {
    "verdict-key": verdict.DECISION.sign_flag,
    "verdict-public": verdict.DECISION.verify_flag,
    "shard-key": verdict.SHARD.sign_flag,
    "shard-public": verdict.SHARD.verify_flag,
    "gitea": "--token-file",
}
# Plain variables that tell a consumer where its credential file is (a path, not a secret).
FILE_ENV: dict[str, tuple[tuple[str, str], ...]] = {
    "teacher": (("TEACHER_API_KEY_FILE", f"{TEACHER_DIR}/api-key"),),
    "model-hub": (("HF_TOKEN_PATH", f"{HUB_DIR}/token"),),
}
# Settings of a credential's service that are not secrets: (variable, key) of the optional ConfigMap
# SETTINGS_CONFIGMAP, given to the same steps as the credential. Unset, each library's default applies.
SETTINGS_CONFIGMAP = "distillery-settings"
SETTINGS: dict[str, tuple[tuple[str, str], ...]] = {
    # A Hugging Face hub mirror for a cluster that does not reach huggingface.co (an Artifactory or Nexus Hugging Face
    # remote, olah): huggingface_hub (and so transformers) downloads the base from HF_ENDPOINT instead.
    "model-hub": (("HF_ENDPOINT", "hf-endpoint"),),
}
# Pods that mount no Secret (a RayJob may not: infra/admission/rayjob-pods.yaml): a credential that is a file
# elsewhere reaches them as its variables (SECRETS), when it has any.
NO_SECRET_VOLUMES = ("train-ray",)

# Egress: which pods may reach hosts outside the cluster and the private endpoints (infra/networkpolicy/steps.yaml).
# A pod carrying EGRESS_LABEL = "internet" gets HTTPS to any address but the cluster's and the metadata address; every
# other step pod reaches HTTPS only at the private endpoints' range (infra/networkpolicy/cluster-network.yaml
# `endpoints-cidr`: S3, STS and the API server behind VPC endpoints on EKS). The internet pods are the users of a
# credential for a public host — the model hub (ingest too: it reads the base model's tokenizer from the hub), a git
# host, a hosted teacher, Gitea (USERS). So the pods that run llama.cpp on GGUFs other roles write (evaluate's
# shards), the ones that hold the verdict's keys or register's role, and serve reach no public host.
EGRESS_LABEL = "distillery/egress"
INTERNET = "internet"
PUBLIC_HOST_CREDENTIALS = ("model-hub", "git", "teacher", "gitea")
PUBLIC_HOST_STEPS = frozenset({s for c in PUBLIC_HOST_CREDENTIALS for s in USERS[c]}) - set(
    NO_SECRET_VOLUMES
)  # the Ray pods have infra/networkpolicy/ray.yaml


def pod_labels(step: str) -> dict[str, str] | None:
    """The labels of `step`'s pod (its template's metadata): its egress class, for the NetworkPolicies."""
    return {EGRESS_LABEL: INTERNET} if step in PUBLIC_HOST_STEPS else None


def file_args(step: str) -> tuple[str, ...]:
    """The flags, each with the path of its mounted file, that give `step` the credential files it uses (FILE_FLAGS)."""
    return tuple(
        arg
        for credential, users in USERS.items()
        if step in users and credential in FILE_FLAGS
        for f in FILES[credential]
        for arg in (FILE_FLAGS[credential], f"{f.directory}/{f.file}")
    )


def _as_files(credential: str, step: str) -> bool:
    return credential in FILES and step not in NO_SECRET_VOLUMES


def secret_volumes(step: str) -> tuple[list[dict], list[dict]]:
    """(volumes, volume mounts), Kubernetes dicts, for the credential files `step` may use."""
    files = [f for credential, users in USERS.items() if step in users and _as_files(credential, step)
             for f in FILES[credential]]  # fmt: skip
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
    """The `env` entries (Kubernetes dicts) with every credential `step` may use, each an optional secretKeyRef, and
    the settings that go with them (SETTINGS), each an optional configMapKeyRef."""
    return (
        [
            {
                "name": variable,
                "valueFrom": {"configMapKeyRef": {"name": SETTINGS_CONFIGMAP, "key": key, "optional": True}},
            }
            for credential, users in USERS.items()
            if step in users
            for variable, key in SETTINGS.get(credential, ())
        ]
        + [
            {"name": e.variable, "valueFrom": {"secretKeyRef": {"name": e.secret, "key": e.key, "optional": True}}}
            for credential, users in USERS.items()
            if step in users and not _as_files(credential, step)
            for e in SECRETS[credential]
        ]
        + [
            {"name": name, "value": path}
            for credential, users in USERS.items()
            if step in users and _as_files(credential, step)
            for name, path in FILE_ENV.get(credential, ())
        ]
    )


# A private CA's certificates (steps/core/trust.py): one optional ConfigMap, in every pod that runs the steps' code,
# not only the pods of one credential's users: nearly every step reaches S3, MLflow, git or the hub over TLS, and a
# CA certificate is no secret to keep from the others. Absent (a cluster of public CAs), the volume is empty.
TRUST_VOLUME = "trust"


def trust_volume() -> dict:
    """The pod's volume of the trust ConfigMap (Kubernetes dict): its one key, optional."""
    return {
        "name": TRUST_VOLUME,
        "configMap": {"name": trust.CONFIGMAP, "optional": True, "items": [{"key": trust.KEY, "path": trust.KEY}]},
    }


def trust_mount() -> dict:
    """Where the container finds the trust ConfigMap's file (`trust.FILE`), read-only."""
    return {"name": TRUST_VOLUME, "mountPath": trust.DIR, "readOnly": True}


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
