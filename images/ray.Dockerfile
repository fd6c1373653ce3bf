# Ray image for the RayJob of `train-backend=ray` (workflows/rayjob.py): head and every worker group, x86 and the
# arm64 Raspberry Pis alike, so one multi-arch manifest list.
#   docker buildx build --platform linux/amd64,linux/arm64 -f images/ray.Dockerfile \
#     --build-arg GIT_SHA=$(git rev-parse HEAD) -t ghcr.io/distillery-ml/distillery-ray:0.1.0 --push .
# Base: the official Python image (one multi-arch manifest for both platforms, Debian, the project's Python 3.11, the
# same base as the cpu image) rather than rayproject/ray, which publishes arm64 under separate `-aarch64` tags and brings
# conda and a Python of its own. ray comes from PyPI at the version constraints.txt pins (workflows/rayjob.py:
# RAY_VERSION). torch is the CPU build: training here is float32 on CPUs with Gloo.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# wget: KubeRay's readiness and liveness probes call the Ray health endpoints with it.
RUN apt-get update \
 && apt-get install -y --no-install-recommends wget=1.21.3-1+deb12u1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 1000 --user-group --create-home distillery \
 && mkdir -p /work && chown 1000:1000 /work
# Into the image's own Python, not a venv: KubeRay starts Ray with `/bin/bash -lc`, and Debian's /etc/profile resets
# PATH for a login shell, so only /usr/local/bin (where this Python and its `ray` script live) is sure to be on it.
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY steps/ steps/
COPY workflows/__init__.py workflows/
# The CPU wheel index has torch for linux/amd64 and linux/arm64; the default index would bring CUDA on amd64.
# The project itself is installed from its source; its dependency ranges live in pyproject.toml, the versions in
# constraints.txt.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu \
      -c constraints.txt "torch==2.13.0" ".[ray]"
ARG GIT_SHA=unknown
ENV HF_HOME=/work/.hf GIT_SHA=${GIT_SHA} PYTHONUNBUFFERED=1
USER 1000:1000
WORKDIR /work
ENTRYPOINT []
CMD ["python", "-m", "steps.train", "--help"]
