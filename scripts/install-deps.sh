#!/usr/bin/env bash
# Installs what gradwire needs to build, test and benchmark on Debian 12.
# CUDA is optional and not installed here: the build finds /usr/local/cuda when present.
# clang and libclang-rt-14-dev build the sanitizer tree of scripts/test.sh --sanitize and the
# fuzzers; clang-format checks the code's layout (the format test), clang-tidy runs
# scripts/tidy.sh; python3-setuptools and python3-wheel make `pip install
# --no-build-isolation .` work offline.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive

$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  cmake g++ make pkg-config git ca-certificates \
  clang libclang-rt-14-dev clang-format clang-tidy \
  libgtest-dev libgmock-dev libbenchmark-dev \
  libucx-dev ucx-utils libibverbs-dev librdmacm-dev \
  libopenmpi-dev openmpi-bin \
  iproute2 iperf3 patchelf xz-utils \
  python3 python3-numpy python3-pytest python3-torch python3-matplotlib python3-sklearn \
  python3-venv python3-pip python3-setuptools python3-wheel python3-dev libtorch-dev pybind11-dev ninja-build \
  dataset-fashion-mnist
