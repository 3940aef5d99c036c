#!/usr/bin/env bash
# Installs every Debian package colossalc needs to build and test, and the pinned PyPI
# modules the reference tests need beside Debian's (into /usr/bin/python3, with
# --no-deps: their dependencies are listed here). Safe to run again: it only installs
# what is missing. Run as root (or with sudo available).
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git
  flex bison
  llvm-14-dev clang-14 libclang-rt-14-dev   # CPU code generation, libFuzzer, sanitizers
  clang-format-14                           # the tree's one style (.clang-format, scripts/format.sh)
  libcjson-dev                              # safetensors headers, plan files
  libopenblas-dev                           # GEMMs on the CPU backend
  libopenmpi-dev openmpi-bin                # multi-rank runs on the CPU backend
  time                                      # /usr/bin/time: each rank's peak memory (bench/ckpt.sh)
  qemu-user                                 # train on older x86-64 CPUs (tests/e2e/run_cpu_builds.sh)
  python3 python3-torch python3-numpy       # reference tests (run by /usr/bin/python3)
  libprotobuf-c-dev protobuf-c-compiler     # ONNX files (frontend/onnx.c; C generated from third_party/onnx)
  python3-pip python3-protobuf              # the PyPI modules below; onnx's protobuf
)
# PyPI modules of the reference tests, pinned to versions that run on Debian's numpy
# and torch 1.13: ml_dtypes rounds to float8_e4m3fn and float8_e5m2 (the fp8 reference);
# transformers is the outside reference of tests/hf (4.40 is among the last to run on
# torch 1.13), with the modules it imports that Debian 12 does not install (PyYAML and
# requests are Debian's)
PYPI=(
  ml_dtypes==0.3.2
  transformers==4.40.2
  safetensors==0.4.3 tokenizers==0.19.1 huggingface_hub==0.23.4
  regex==2024.5.15 tqdm==4.66.4 filelock==3.15.4 packaging==24.1 fsspec==2024.6.1
  # ONNX import tests (tests/onnx): onnxruntime is the reference for the forward loss,
  # onnx reads and checks files; built for Python 3.11, numpy 1.24 and protobuf 3.21
  onnx==1.15.0 onnxruntime==1.16.3
)

pypi() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  for m in "${PYPI[@]}"; do
    /usr/bin/python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('${m%%==*}') != '${m##*==}')" \
      2>/dev/null && continue
    echo "setup: installing $m from PyPI for /usr/bin/python3"
    $sudo /usr/bin/python3 -m pip install -q --break-system-packages --no-deps "$m"
  done
  /usr/bin/python3 -c "import onnx, onnxruntime" || { echo "setup: onnx or onnxruntime does not import" >&2; exit 1; }
}

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages already installed"
  pypi
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
pypi
