# Sourced by the multi-rank scripts: the device their ranks run on.
#   DEVICE unset or cpu  the CPU device; devargs is empty
#   DEVICE=cuda EMUL=DIR the CUDA device of the host emulation in DIR (tests/cuda_emul):
#                        DIR first on LD_LIBRARY_PATH (mpirun's ranks inherit it),
#                        devargs selects the device and a kernel cache in the run's
#                        folder, which device_prepare PROGRAM fills once (every rank
#                        then loads the kernels rather than each compiling them)
# One-rank reference runs pass --device cpu themselves: with the emulation on the path,
# the default would be the emulated GPU.
devargs=
device_prepare() { :; }
if [ "${DEVICE:-cpu}" = cuda ]; then
  [ -n "${EMUL:-}" ] || { echo "DEVICE=cuda needs EMUL, the emulation's library folder"; exit 1; }
  LD_LIBRARY_PATH="$EMUL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
  devargs="--device cuda --kernel-cache $PWD/kc"
  device_prepare() { "$1" --compile-kernels sm_90 --kernel-cache "$PWD/kc" > /dev/null; }
fi
