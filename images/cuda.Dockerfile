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
COPY constraints.txt ./
# torch and its CUDA libraries (GBs) in a layer of their own, kept while the project changes.
ARG TORCH_VERSION=2.13.0
RUN pip install --no-cache-dir -c constraints.txt "torch==${TORCH_VERSION}"
# The project from its source: dependency ranges in pyproject.toml, the tested versions in constraints.txt.
COPY pyproject.toml README.md ./
COPY steps/ steps/
COPY workflows/__init__.py workflows/
# torch named again so pip keeps this one; the build fails unless it is the CUDA build of that version.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir -c constraints.txt "torch==${TORCH_VERSION}" ".[gpu]" \
 && python -c "import torch; v, c = torch.__version__, torch.version.cuda; \
raise SystemExit(0 if c is not None and v.split('+')[0] == '${TORCH_VERSION}' \
else f'want a CUDA build of torch ${TORCH_VERSION}, got {v} (CUDA {c})')"
ARG GIT_SHA=unknown
# compute, as the nvidia/cuda images set it: with it unset, older NVIDIA container toolkits mount only the driver's
# `utility` libraries (nvidia-smi, NVML) and CUDA finds no driver.
# NVIDIA_VISIBLE_DEVICES stays unset: the device plugin sets it to the GPUs the pod was given.
ENV HF_HOME=/work/.hf GIT_SHA=${GIT_SHA} PYTHONUNBUFFERED=1 NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 1000:1000
ENTRYPOINT []
CMD ["python", "-m", "steps.train", "--help"]
