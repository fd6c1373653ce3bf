"""The step images' references: render settings, not constants.

Set from the environment (`from_env`: DISTILLERY_IMAGE_REGISTRY, DISTILLERY_IMAGE_TAG, DISTILLERY_IMAGE_DIGEST_CPU,
_CUDA, _RAY) or from the render command's flags (`parse_digests` reads `--image-digest cpu=sha256:…`); `DEFAULT`
otherwise.

`docker-bake.hcl` builds the three images as `<registry>/distillery-<kind>:<tag>` (its REGISTRY and TAG variables
default to `DEFAULT` here; a test keeps them equal). A digest pins what the cluster pulls to the bytes that were built
and pushed (`docker buildx bake --push --metadata-file meta.json` prints it): the reference is then
`<name>:<tag>@sha256:…`, and the tag only tells a reader which release it was.

Every value is checked against Docker's reference grammar (distribution/reference, regexp.go: `NameRegexp`,
`TagRegexp`; reference.go: `NameTotalLengthMax`) before anything is rendered, and all problems are reported at once.

Argo's executor image (its `init` and `wait` containers in every step pod) is a render setting too, for the one list
that names it, infra/admission/step-pods.yaml's `executorImages`: `default_argoexec()`, Argo's own image at the Argo
release this project is built and tested against, unless `DISTILLERY_ARGOEXEC_IMAGE` or the render's
`--argoexec-image` names the exact reference your controller gives its pods (a mirror, another release, a digest).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("cpu", "cuda", "ray")
# The project's version (pyproject.toml; a test keeps them equal): the tag a release's images are pushed under.
VERSION = "0.1.0"
ENV_REGISTRY = "DISTILLERY_IMAGE_REGISTRY"
ENV_TAG = "DISTILLERY_IMAGE_TAG"
ENV_DIGEST = {kind: f"DISTILLERY_IMAGE_DIGEST_{kind.upper()}" for kind in KINDS}

# distribution/reference regexp.go, spelled out in Python (its \w is ASCII only, as Go's is).
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_NAME = re.compile(rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
# The grammar admits any algorithm; registries and the OCI image spec (descriptor.md) know sha256 by this form, and
# that is what buildx reports.
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
NAME_MAX = 255  # distribution/reference: NameTotalLengthMax, the name without tag or digest

REGISTRY_RULE = (
    "[host[:port]/]path, e.g. ghcr.io/distillery-ml or localhost:5000/ml: lowercase letters, digits and . _ - in the "
    "path, no scheme, no trailing /"
)
TAG_RULE = "up to 128 of A-Z a-z 0-9 _ . -, not starting with . or -, e.g. 0.1.0"
DIGEST_RULE = "sha256: followed by 64 lowercase hex digits, e.g. from `docker buildx bake --push --metadata-file`"


def image_name(registry: str, kind: str) -> str:
    """The repository an image of this kind is pushed to (docker-bake.hcl's tags)."""
    return f"{registry}/distillery-{kind}"


def problems(registry: str, tag: str, digests: Mapping[str, str], names: Mapping[str, str] | None = None) -> list[str]:
    """Every way these settings break the reference grammar, one line each, naming the setting as `names` spells it
    (keys "registry", "tag" and each kind; by default the Images field names)."""
    names = {"registry": "registry", "tag": "tag", **{k: f"digests[{k!r}]" for k in KINDS}, **(names or {})}
    found = []
    longest = image_name(registry, max(KINDS, key=len))
    if not _NAME.fullmatch(longest):
        found.append(
            f"{names['registry']}={registry!r} is not a registry and repository prefix; allowed: {REGISTRY_RULE}"
        )
    elif len(longest) > NAME_MAX:
        found.append(f"{names['registry']}={registry!r} makes {longest!r} longer than {NAME_MAX} characters")
    if not _TAG.fullmatch(tag):
        found.append(f"{names['tag']}={tag!r} is not an image tag; allowed: {TAG_RULE}")
    for kind, digest in digests.items():
        if kind not in KINDS:
            found.append(f"digest for unknown image kind {kind!r}; kinds are {', '.join(KINDS)}")
        elif not _DIGEST.fullmatch(digest):
            found.append(f"{names[kind]}={digest!r} is not an image digest; allowed: {DIGEST_RULE}")
    return found


@dataclass(frozen=True)
class Images:
    """Where the step images are pulled from: one registry prefix and tag for all three, a digest per kind if known."""

    registry: str  # e.g. ghcr.io/distillery-ml; images are <registry>/distillery-<kind>
    tag: str  # e.g. 0.1.0: the release the images were built for
    digests: dict[str, str] = field(default_factory=dict, hash=False)  # kind -> sha256:…, pins the pushed bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "digests", dict(self.digests))  # frozen means frozen: no alias of the caller's dict
        found = problems(self.registry, self.tag, self.digests)
        if found:
            raise ValueError("bad image settings:\n  " + "\n  ".join(found))

    def ref(self, kind: str) -> str:
        """`<registry>/distillery-<kind>:<tag>`, with `@sha256:…` when that kind's digest is known."""
        if kind not in KINDS:
            raise ValueError(f"unknown image kind {kind!r}; kinds are {', '.join(KINDS)}")
        ref = f"{image_name(self.registry, kind)}:{self.tag}"
        digest = self.digests.get(kind)
        return f"{ref}@{digest}" if digest else ref


DEFAULT = Images("ghcr.io/distillery-ml", VERSION, {})


def from_env(environ: Mapping[str, str] | None = None) -> Images:
    """`DEFAULT`, with whatever the DISTILLERY_IMAGE_* variables set. A variable that is set must be valid and
    non-empty (unset it to keep the default), and an unknown DISTILLERY_IMAGE_* variable is an error, not ignored."""
    env = os.environ if environ is None else environ
    known = {ENV_REGISTRY, ENV_TAG, *ENV_DIGEST.values()}
    found = [
        f"{var} is not a setting; the settings are {', '.join(sorted(known))}"
        for var in sorted(env)
        if var.startswith("DISTILLERY_IMAGE_") and var not in known
    ]
    found += [
        f"{var} is set but empty; unset it to keep the default, or give a value"
        for var in sorted(known)
        if var in env and not env[var]
    ]
    registry = env.get(ENV_REGISTRY) or DEFAULT.registry
    tag = env.get(ENV_TAG) or DEFAULT.tag
    digests = {kind: env[var] for kind, var in ENV_DIGEST.items() if env.get(var)}
    names = {"registry": ENV_REGISTRY, "tag": ENV_TAG, **ENV_DIGEST}
    found += problems(registry, tag, digests, names)
    if found:
        raise ValueError("bad image settings in the environment:\n  " + "\n  ".join(found))
    return Images(registry, tag, digests)


def parse_digests(items: Iterable[str], flag: str = "--image-digest") -> dict[str, str]:
    """`["cpu=sha256:…", …]` (a repeated command-line flag) as {kind: digest}; the digests themselves are checked by
    `Images`. Raises one ValueError listing every malformed item."""
    digests: dict[str, str] = {}
    found = []
    for item in items:
        kind, sep, digest = item.partition("=")
        if not sep or kind not in KINDS:
            found.append(f"{flag} {item!r}: expected KIND=sha256:… with KIND one of {', '.join(KINDS)}")
        elif kind in digests:
            found.append(f"{flag} {item!r}: a second digest for {kind}")
        else:
            digests[kind] = digest
    if found:
        raise ValueError("bad image digests:\n  " + "\n  ".join(found))
    return digests


# Argo's executor. The Argo release is one fact: the one engines/harness/go.mod requires, whose code the tests run
# (scripts/engines.sh builds Argo's CLI, workflow-controller and argoexec at it, reading the same line). Argo's
# controller names in every pod its --executor-image, else its ConfigMap's executor.image, else
# `quay.io/argoproj/argoexec:<its release>` (workflow/controller/config.go `executorImage`). No digest: none could be
# read from a registry here, and a made-up one would be worse than the tag.
ARGOEXEC = "quay.io/argoproj/argoexec"
ARGO_MODULE = "github.com/argoproj/argo-workflows/v4"
ARGO_GO_MOD = Path(__file__).resolve().parent.parent / "engines/harness/go.mod"
ENV_ARGOEXEC = "DISTILLERY_ARGOEXEC_IMAGE"
ARGOEXEC_RULE = (
    "the exact reference your Argo controller puts in its pods (its --executor-image or the ConfigMap's "
    "executor.image): <name>:<tag>, <name>@sha256:… or <name>:<tag>@sha256:…, e.g. "
    "registry.example.com/mirror/argoexec:v4.0.6"
)


@functools.cache
def argo_release(go_mod: Path = ARGO_GO_MOD) -> str:
    """The Argo Workflows release this project is built and tested against: the version of Argo's module that
    engines/harness/go.mod requires (e.g. v4.0.5)."""
    found = re.findall(rf"^\s*(?:require\s+)?{re.escape(ARGO_MODULE)}\s+(v[0-9]+\.[0-9]+\.[0-9]+)\s*$",
                       Path(go_mod).read_text(), flags=re.MULTILINE)  # fmt: skip
    if len(found) != 1:
        raise ValueError(f"{go_mod}: expected one requirement of {ARGO_MODULE} at a release (vX.Y.Z), found {found}")
    return found[0]


def default_argoexec() -> str:
    """Argo's executor image as the controller of `argo_release()` names it by default."""
    return f"{ARGOEXEC}:{argo_release()}"


def argoexec_problems(ref: str, setting: str = ENV_ARGOEXEC) -> list[str]:
    """How `ref` is not a whole image reference with a tag or a digest (Docker's grammar); [] when it is."""
    name, at, digest = ref.partition("@")
    # A colon after the last slash starts the tag; one before it is a registry's port.
    name, colon, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
    ok = (_NAME.fullmatch(name) and len(name) <= NAME_MAX and (not colon or _TAG.fullmatch(tag))
          and (not at or _DIGEST.fullmatch(digest)) and (colon or at))  # fmt: skip
    return [] if ok else [f"{setting}={ref!r} is not an image reference with a tag or a digest; give {ARGOEXEC_RULE}"]


def argoexec_from_env(environ: Mapping[str, str] | None = None) -> str:
    """`DISTILLERY_ARGOEXEC_IMAGE` when set (ValueError when it is empty or not a reference), else
    `default_argoexec()`."""
    env = os.environ if environ is None else environ
    if ENV_ARGOEXEC not in env:
        return default_argoexec()
    found = argoexec_problems(env[ENV_ARGOEXEC])
    if found:
        raise ValueError("bad image settings in the environment:\n  " + "\n  ".join(found))
    return env[ENV_ARGOEXEC]
