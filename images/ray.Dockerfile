# Ray image for the RayJob of `train-backend=ray` (workflows/rayjob.py): head and every worker group, x86 and the
# arm64 Raspberry Pis alike, so one multi-arch manifest list.
# Built by docker-bake.hcl (target ray, linux/amd64 and linux/arm64):  docker buildx bake ray
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
# torch alone, from PyTorch's CPU index (it has linux/amd64 and linux/arm64 builds; PyPI's torch is the CUDA build on
# both). The version is the one the test suite passes with (scripts/setup.sh). Its dependencies come with the project
# below, from the hashed lock. Every later install is --no-deps, so nothing can swap it for PyPI's CUDA build.
ARG TORCH_VERSION=2.13.0
# Where PyTorch's CPU index cannot be reached (a mirror-only network, this project's build machines), pass
# TORCH_INDEX_URL=https://pypi.org/simple TORCH_BUILD=cuda: PyPI's x86_64 torch is the CUDA build, so it then comes
# with the CUDA libraries it requires (triton, nvidia-*, cuda-*) from the cuda image's hashed lock, and the check
# after the project install wants that build instead (GBs larger; runs on CPU alike). scripts/images.sh does so.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_BUILD=cpu
COPY images/locks/cuda.txt images/locks/
# hadolint ignore=SC3015
RUN [[ "${TORCH_BUILD}" =~ ^(cpu|cuda)$ ]] \
 && pip install --no-cache-dir --no-deps --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" \
 && pip show torch | sed -n 's/^Version: /torch==/p' > /opt/torch-${TORCH_BUILD}.txt \
 && grep -q "^torch==${TORCH_VERSION}" /opt/torch-${TORCH_BUILD}.txt \
 && awk -v build="${TORCH_BUILD}" '/^[^ #]/ {keep = build == "cuda" && /^(triton|nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+)==/} keep' \
      images/locks/cuda.txt > /tmp/torch-cuda.txt \
 && pip install --no-cache-dir --require-hashes --no-deps -r /tmp/torch-cuda.txt && rm /tmp/torch-cuda.txt
# Every other package from PyPI: exactly the hashed lock (scripts/lock_images.py, constraints.txt's versions; one lock
# for both architectures, each file's sha256 listed), nothing resolved at build time.
COPY images/locks/ray.txt images/locks/
RUN pip install --no-cache-dir --require-hashes --no-deps -r images/locks/ray.txt
# The project from its source, with no dependency of its own to fetch (the lock has them; pip check proves it).
COPY pyproject.toml README.md ./
COPY steps/ steps/
COPY workflows/__init__.py workflows/
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-deps --no-build-isolation ".[ray]" \
 && python -c "import torch; v, c = torch.__version__, torch.version.cuda; \
raise SystemExit(0 if (c is None) == ('${TORCH_BUILD}' == 'cpu') and v.split('+')[0] == '${TORCH_VERSION}' \
else f'want the ${TORCH_BUILD} build of torch ${TORCH_VERSION}, got {v} (CUDA {c})')" \
 && pip check
ARG GIT_SHA=unknown
ENV HF_HOME=/work/.hf GIT_SHA=${GIT_SHA} PYTHONUNBUFFERED=1
USER 1000:1000
WORKDIR /work
ENTRYPOINT []
CMD ["python", "-m", "steps.train", "--help"]
