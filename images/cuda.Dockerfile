# Step image for train on the EKS spot GPU pool: bf16 LoRA, 4-bit QLoRA through bitsandbytes.
# Built by docker-bake.hcl (target cuda, linux/amd64):  docker buildx bake cuda
# Base: the plain Python image, like the other two. PyPI's linux/amd64 torch is itself the CUDA build and brings the
# CUDA runtime, cuDNN, cuBLAS and NCCL as nvidia-* wheels, so a CUDA base image would only add a second copy; the node
# provides the driver (the NVIDIA container toolkit mounts it). torch is the version the test suite passes with
# (scripts/setup.sh), not whatever a base image happens to carry.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN useradd --uid 1000 --user-group --create-home distillery \
 && mkdir -p /work && chown 1000:1000 /work
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /app
# torch, its CUDA libraries (GBs) and every other package from PyPI: exactly the hashed lock (scripts/lock_images.py:
# constraints.txt's versions, torch ${TORCH_VERSION}), nothing resolved at build time.
ARG TORCH_VERSION=2.13.0
COPY images/locks/cuda.txt images/locks/
RUN pip install --no-cache-dir --require-hashes --no-deps -r images/locks/cuda.txt
# The project from its source, with no dependency of its own to fetch (the lock has them; pip check proves it). The
# build fails unless torch is the CUDA build of the tested version.
COPY pyproject.toml README.md ./
COPY steps/ steps/
COPY workflows/__init__.py workflows/
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-deps --no-build-isolation ".[gpu]" \
 && python -c "import torch; v, c = torch.__version__, torch.version.cuda; \
raise SystemExit(0 if c is not None and v.split('+')[0] == '${TORCH_VERSION}' \
else f'want a CUDA build of torch ${TORCH_VERSION}, got {v} (CUDA {c})')" \
 && pip check
ARG GIT_SHA=unknown
# compute, as the nvidia/cuda images set it: with it unset, older NVIDIA container toolkits mount only the driver's
# `utility` libraries (nvidia-smi, NVML) and CUDA finds no driver.
# NVIDIA_VISIBLE_DEVICES stays unset: the device plugin sets it to the GPUs the pod was given.
ENV HF_HOME=/work/.hf GIT_SHA=${GIT_SHA} PYTHONUNBUFFERED=1 NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 1000:1000
ENTRYPOINT []
CMD ["python", "-m", "steps.train", "--help"]
