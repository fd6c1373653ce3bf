# Step image for fetch-dataset, train (cpu), convert-gguf, evaluate, register and propose.
#   docker build -f images/cpu.Dockerfile --build-arg GIT_SHA=$(git rev-parse HEAD) -t ghcr.io/distillery-ml/distillery-cpu:0.1.0 .
# llama-cpp-python is built portable (GGML_NATIVE=OFF: the nodes' CPUs differ from the builder's) and llama.cpp's
# converter is extracted from the same sdist, by the same script the local set-up uses.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential=12.9 cmake=3.25.1-1 git=1:2.39.5-0+deb12u3 \
 && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY scripts/install_llama_cpp.sh scripts/
COPY steps/ steps/
COPY workflows/__init__.py workflows/
RUN DISTILLERY_CACHE=/tmp/distillery scripts/install_llama_cpp.sh /opt/llama.cpp && rm -rf /tmp/distillery
# The CPU build of torch: the default wheel index would bring CUDA libraries this image never uses.
# The project itself is installed from its source; its dependency ranges live in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu ".[data,train,convert,evaluate,register]"

FROM ${PYTHON_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends git=1:2.39.5-0+deb12u3 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 1000 --user-group --create-home distillery \
 && mkdir -p /work && chown 1000:1000 /work
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/llama.cpp /opt/llama.cpp
WORKDIR /app
COPY steps/ steps/
ARG GIT_SHA=unknown
ENV PATH=/opt/venv/bin:$PATH DISTILLERY_LLAMA_CPP=/opt/llama.cpp HF_HOME=/work/.hf DVC_NO_ANALYTICS=1 \
    MLFLOW_DISABLE_TELEMETRY=true GIT_SHA=${GIT_SHA} PYTHONUNBUFFERED=1
USER 1000:1000
ENTRYPOINT []
CMD ["python", "-m", "steps.fetch_dataset", "--help"]
