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
  libcjson-dev                              # safetensors headers, plan files
  libopenblas-dev                           # GEMMs on the CPU backend
  libopenmpi-dev openmpi-bin                # multi-rank runs on the CPU backend
  python3 python3-torch python3-numpy       # reference tests (run by /usr/bin/python3)
  libprotobuf-c-dev protobuf-c-compiler     # ONNX files (frontend/onnx.c; C generated from third_party/onnx)
  python3-pip python3-protobuf              # the PyPI modules below; onnx's protobuf
)

# ONNX import tests (tests/onnx): onnxruntime is the reference for the forward loss,
# onnx reads and checks files. Versions built for Python 3.11 that work with Debian's
# numpy 1.24 and protobuf 3.21 (checked: `import onnx, onnxruntime` and the tests run).
PYPI=(
  onnx==1.15.0
  onnxruntime==1.16.3
)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages already installed"
else
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

wanted=()
for m in "${PYPI[@]}"; do
  [ "$(/usr/bin/python3 -m pip show "${m%%==*}" 2>/dev/null | sed -n 's/^Version: //p')" = "${m##*==}" ] || wanted+=("$m")
done
if [ ${#wanted[@]} -eq 0 ]; then
  echo "setup: all ${#PYPI[@]} PyPI modules already installed"
else
  echo "setup: installing ${wanted[*]} from PyPI"
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages --no-deps "${wanted[@]}"
fi
/usr/bin/python3 -c "import onnx, onnxruntime" || { echo "setup: onnx or onnxruntime does not import" >&2; exit 1; }
