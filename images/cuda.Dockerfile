# Step image for train on the EKS spot GPU pool: bf16 LoRA, 4-bit QLoRA through bitsandbytes.
#   docker build -f images/cuda.Dockerfile --build-arg GIT_SHA=$(git rev-parse HEAD) -t ghcr.io/distillery-ml/distillery-cuda:0.1.0 .
# The base carries CUDA 12.4, cuDNN 9 and a matching torch; pip keeps that torch (the train extra admits it).
ARG CUDA_IMAGE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime

FROM ${CUDA_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY steps/ steps/
COPY workflows/__init__.py workflows/
# The project itself is installed from its source; its dependency ranges live in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[gpu]" \
 && useradd --uid 1000 --user-group --create-home distillery \
 && mkdir -p /work && chown 1000:1000 /work
ARG GIT_SHA=unknown
ENV HF_HOME=/work/.hf GIT_SHA=${GIT_SHA} PYTHONUNBUFFERED=1
USER 1000:1000
ENTRYPOINT []
CMD ["python", "-m", "steps.train", "--help"]
