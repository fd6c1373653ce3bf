# Step image for the EKS spot GPU pool: train (bf16 LoRA, 4-bit QLoRA through bitsandbytes) and evaluate's shards
# (llama.cpp with every layer on the GPU: workflows/distill.py, --gpu-layers -1).
# Built by docker-bake.hcl (target cuda, linux/amd64):  docker buildx bake cuda
# Base: the plain Python image, like the other two. PyPI's linux/amd64 torch is itself the CUDA build and brings the
# CUDA runtime, cuDNN, cuBLAS and NCCL as nvidia-* wheels, so a CUDA base image would only add a second copy; the node
# provides the driver (the NVIDIA container toolkit mounts it). torch is the version the test suite passes with
# (scripts/setup.sh), not whatever a base image happens to carry.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# llama.cpp's CUDA build, by the script the cpu image's portable build uses (scripts/install_llama_cpp.sh; CMake flags
# through CMAKE_ARGS, which also key its wheel cache). nvcc and the CUDA headers and libraries come from NVIDIA's PyPI
# wheels of the CUDA release torch is built against (torch 2.13.0 requires cuda-toolkit 13.0.3; a test keeps them
# equal), so llama.cpp links the very libcudart and libcublas torch installs below. Architectures: the GPU pool's cards
# (steps/sizing/cluster.py GPU_CARDS; a test keeps them covered): A10G 8.6, L4 and L40S 8.9.
FROM ${PYTHON_IMAGE} AS llama
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential=12.9 cmake=3.25.1-1 git=1:2.39.5-0+deb12u3 \
 && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
# The version scripts/lock_images.py locks (images/locks/cuda-build.txt, hashed); change both together.
ARG CUDA_TOOLKIT_VERSION=13.0.3
COPY images/locks/cuda-build.txt images/locks/
RUN pip install --no-cache-dir --require-hashes --no-deps -r images/locks/cuda-build.txt
COPY scripts/install_llama_cpp.sh scripts/
ARG CUDA_ARCHITECTURES="86;89"
# CMake finds the toolkit by its root; the wheels ship only the versioned libraries, so the link names are added.
# GGML_CUDA_NO_VMM: no link to the driver's libcuda (the wheels carry no stub of it; the node's driver provides it at
# run time, through the runtime library).
RUN cuda=/opt/venv/lib/python3.11/site-packages/nvidia/cu13 \
 && for lib in cudart cublas cublasLt; do ln -s "lib$lib.so.13" "$cuda/lib/lib$lib.so"; done \
 && export PATH="$cuda/bin:$PATH" DISTILLERY_CACHE=/tmp/distillery \
      CMAKE_ARGS="-DGGML_CUDA=ON -DGGML_CUDA_NO_VMM=ON -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES} \
-DCUDAToolkit_ROOT=$cuda" \
 && scripts/install_llama_cpp.sh /tmp/llama.cpp \
 && mkdir -p /wheels && cp "$(scripts/install_llama_cpp.sh --wheel-dir)"/llama_cpp_python-*.whl /wheels/

FROM ${PYTHON_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# libgomp1: llama.cpp's ggml is built with OpenMP (the llama stage's gcc brings it; python:3.11-slim does not), and
# without it `import llama_cpp` fails (libllama.so: libgomp.so.1: cannot open shared object file; found in the cpu
# image, which has the same runtime stage).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1=12.2.0-14+deb12u1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 1000 --user-group --create-home distillery \
 && mkdir -p /work && chown 1000:1000 /work
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /app
# torch, its CUDA libraries (GBs) and every other package from PyPI: exactly the hashed lock (scripts/lock_images.py:
# constraints.txt's versions, torch ${TORCH_VERSION}), nothing resolved at build time.
ARG TORCH_VERSION=2.13.0
COPY images/locks/cuda.txt images/locks/
RUN pip install --no-cache-dir --require-hashes --no-deps -r images/locks/cuda.txt
# llama.cpp's CUDA build (the stage above), so the project's pin (the evaluate extra) finds it installed.
COPY --from=llama /wheels /tmp/wheels
RUN pip install --no-cache-dir --no-deps /tmp/wheels/llama_cpp_python-*.whl && rm -rf /tmp/wheels
# The project from its source, with no dependency of its own to fetch (the lock has them; pip check proves it); gpu
# for train, evaluate and register for evaluate's shards (the champion comes from MLflow). The build fails unless
# torch is the CUDA build of the tested version.
COPY pyproject.toml README.md ./
COPY steps/ steps/
COPY workflows/__init__.py workflows/
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-deps --no-build-isolation ".[gpu,evaluate,register]" \
 && python -c "import torch; v, c = torch.__version__, torch.version.cuda; \
raise SystemExit(0 if c is not None and v.split('+')[0] == '${TORCH_VERSION}' \
else f'want a CUDA build of torch ${TORCH_VERSION}, got {v} (CUDA {c})')" \
 && pip check
ARG GIT_SHA=unknown
# compute, as the nvidia/cuda images set it: with it unset, older NVIDIA container toolkits mount only the driver's
# `utility` libraries (nvidia-smi, NVML) and CUDA finds no driver.
# NVIDIA_VISIBLE_DEVICES stays unset: the device plugin sets it to the GPUs the pod was given.
# LD_LIBRARY_PATH: llama.cpp's CUDA library loads libcudart and libcublas from torch's nvidia wheels (torch finds
# them itself; llama.cpp's shared library only through the loader's path).
ENV HF_HOME=/work/.hf GIT_SHA=${GIT_SHA} PYTHONUNBUFFERED=1 NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    LD_LIBRARY_PATH=/opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib
USER 1000:1000
ENTRYPOINT []
CMD ["python", "-m", "steps.train", "--help"]
