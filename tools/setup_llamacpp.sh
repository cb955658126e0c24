#!/usr/bin/env bash
# Builds llama.cpp's llama-bench and llama-quantize for `//tools:bench -- llamacpp`.
#
#   tools/setup_llamacpp.sh [CACHE_DIR]      (default ~/.cache/mobius/llamacpp)
#   export MOBIUS_LLAMA_CPP=CACHE_DIR/llama_cpp_python-VERSION   (printed at the end)
#
# The source is llama-cpp-python's sdist from PyPI (it vendors llama.cpp with
# convert_hf_to_gguf.py and gguf-py), so the pip client is the only download.
# GGML_NATIVE is off: a native build may pick kernels (AMX) that the CPU
# advertises but a VM traps. AVX-512 is enabled only where /proc/cpuinfo lists
# avx512f, so the binaries run on the machine that built them.
# Never part of the test suite: this compiles for minutes.
set -euo pipefail

cache="${1:-${HOME}/.cache/mobius/llamacpp}"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
jobs="${JOBS:-2}"
mkdir -p "${cache}"
src="${cache}/llama_cpp_python-${version}"

if [[ ! -d "${src}/vendor/llama.cpp" ]]; then
  python3 -m pip download --no-deps --no-binary :all: -d "${cache}" \
    "llama-cpp-python==${version}"
  tar -xzf "${cache}/llama_cpp_python-${version}.tar.gz" -C "${cache}"
fi

avx512=OFF
if grep -qw avx512f /proc/cpuinfo; then avx512=ON; fi

build="${src}/build"
nice -n "${NICE:-10}" cmake -S "${src}/vendor/llama.cpp" -B "${build}" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DGGML_BMI2=ON -DGGML_AVX512="${avx512}" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF
nice -n "${NICE:-10}" cmake --build "${build}" -j "${jobs}" --target llama-bench llama-quantize

echo "llama.cpp tools in ${build}/bin (AVX-512 ${avx512})"
echo "export MOBIUS_LLAMA_CPP=${src}"
