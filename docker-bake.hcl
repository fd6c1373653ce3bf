# The step images, built and pushed in one command from the repository root:
#
#   docker buildx bake --push                                   # ghcr.io/distillery-ml/distillery-{cpu,cuda,ray}:0.1.0
#   REGISTRY=registry.example.com/ml TAG=0.2.0 GIT_SHA=$(git rev-parse HEAD) docker buildx bake --push
#   docker buildx bake --push --metadata-file meta.json         # meta.json: each target's pushed digest
#   docker buildx bake --print                                  # the resolved definition; builds nothing
#   docker buildx bake --load --set '*.platform=linux/amd64' cpu   # one image into the local docker, not pushed
#
# Then render the workflows against what was pushed (workflows/images.py; the digests from meta.json):
#   python -m workflows.render --image-registry "$REGISTRY" --image-tag "$TAG" --image-digest cpu=sha256:…
#
# ray is one manifest list for linux/amd64 and linux/arm64 (the RayJob's x86 groups and its Raspberry Pi group);
# building arm64 needs a builder that can: `docker buildx create --use` plus QEMU (`docker run --privileged --rm
# tonistiigi/binfmt --install arm64`), or an arm64 node appended to the builder. cpu and cuda run on x86 nodes only.
# The defaults equal workflows/images.py's DEFAULT (a test keeps them so); TAG is the project version (pyproject.toml).

variable "REGISTRY" {
  default = "ghcr.io/distillery-ml"
}

variable "TAG" {
  default = "0.1.0"
}

# The commit the images are built from, in each image's GIT_SHA and revision label; pass $(git rev-parse HEAD).
variable "GIT_SHA" {
  default = "unknown"
}

group "default" {
  targets = ["cpu", "cuda", "ray"]
}

target "_common" {
  context = "."
  args = {
    GIT_SHA = GIT_SHA
  }
  labels = {
    "org.opencontainers.image.revision" = GIT_SHA
    "org.opencontainers.image.version"  = TAG
  }
}

target "cpu" {
  inherits   = ["_common"]
  dockerfile = "images/cpu.Dockerfile"
  platforms  = ["linux/amd64"]
  tags       = ["${REGISTRY}/distillery-cpu:${TAG}"]
}

target "cuda" {
  inherits   = ["_common"]
  dockerfile = "images/cuda.Dockerfile"
  platforms  = ["linux/amd64"]
  tags       = ["${REGISTRY}/distillery-cuda:${TAG}"]
}

target "ray" {
  inherits   = ["_common"]
  dockerfile = "images/ray.Dockerfile"
  platforms  = ["linux/amd64", "linux/arm64"]
  tags       = ["${REGISTRY}/distillery-ray:${TAG}"]
}
