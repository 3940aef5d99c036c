# Shared by the fault tests (sourced): finding a rank's process, waiting with a bound.
# Every launch is tagged (FAULTS_TAG in its environment) so that the tests find their
# own processes, whatever the launcher's process tree.

FAULTS_TAG="faults-$$-$(date +%s%N)"
export FAULTS_TAG

# Every process this test started (tagged), whatever its name: fail ends them, so that a
# failing test leaves no rank running (they would take the cores of the tests after it).
tagged_pids() {
  for env in /proc/[0-9]*/environ; do
    pid=${env#/proc/} && pid=${pid%/environ}
    { tr '\0' '\n' < "$env"; } 2> /dev/null | grep -qx "FAULTS_TAG=$FAULTS_TAG" && echo "$pid"
  done
  return 0
}

fail() {
  echo "FAIL: $*"
  pids=$(tagged_pids)
  [ -z "$pids" ] || kill -9 $pids 2> /dev/null || true
  exit 1
}

# The tagged train processes (named TRAIN_NAME), one a line.
live_pids() {
  for comm in $(grep -lx "$TRAIN_NAME" /proc/[0-9]*/comm 2> /dev/null); do
    dir=${comm%/comm}
    { tr '\0' '\n' < "$dir/environ"; } 2> /dev/null | grep -qx "FAULTS_TAG=$FAULTS_TAG" && echo "${dir#/proc/}"
  done
  return 0
}

# The tagged train process of world rank $1 (Open MPI, MPICH and PMIx name it differently).
rank_pids() {
  for pid in $(live_pids); do
    { tr '\0' '\n' < "/proc/$pid/environ"; } 2> /dev/null | grep -Eqx "(OMPI_COMM_WORLD_RANK|PMI_RANK|PMIX_RANK)=$1" &&
      echo "$pid"
  done
  return 0
}

# Steps rank 0 printed to file $1.
steps_done() {
  n=$(grep -c '^step ' "$1" 2> /dev/null) || true
  echo "${n:-0}"
}

# Steps rank 0 logged to file $1 (--log): written and flushed by rank 0 itself at each
# step's end, where its printed lines reach the file through the launcher, some steps
# late, and those in flight are lost when the job is aborted.
steps_logged() {
  n=$(grep -c '"loss":' "$1" 2> /dev/null) || true
  echo "${n:-0}"
}

# Waits until file $1 shows at least $2 steps (at most $3 s).
wait_steps() {
  i=0
  while [ "$(steps_done "$1")" -lt "$2" ]; do
    i=$((i + 1))
    [ $i -gt $(($3 * 20)) ] && fail "$1 did not reach step $2 in $3 s"
    sleep 0.05
  done
}

# Waits for pid $1 (a child of this shell) at most $2 s, then kills what is left of the
# tagged processes (so that a failing test leaves nothing behind) and fails; else sets
# status to its exit status and waited to the seconds it took.
wait_bounded() {
  t0=$(date +%s)
  while kill -0 "$1" 2> /dev/null; do
    if [ $(($(date +%s) - t0)) -gt "$2" ]; then
      for p in $(live_pids); do kill -9 "$p" 2> /dev/null; done
      kill -9 "$1" 2> /dev/null
      fail "the job was still running after $2 s"
    fi
    sleep 0.1
  done
  status=0
  wait "$1" || status=$?
  waited=$(($(date +%s) - t0))
}

# A number in [0, $1).
random_below() { echo $(($(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % $1)); }
