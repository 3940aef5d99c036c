#!/usr/bin/env bash
# Checkpoints at scale: GPT-2 124M (models/gpt2.model at seq 64, one row a rank) on 1, 2,
# 4 and 8 CPU ranks, as ZeRO-3 over data parallelism and as a dp x tp x pp mesh (tp 2;
# tp 2 x pp 2; dp 2 x tp 2 x pp 2 with ZeRO-1, Megatron's sharding). Three runs of each plan: 2
# steps without checkpoints (the baseline), 2 steps with a checkpoint after each
# (--ckpt-every 1: every rank writes its own shard, the first one in the background of
# step 2), and a resume of the last checkpoint under the same plan for a third step. For
# each: every rank's whole-run peak resident memory (/usr/bin/time's maximum RSS), the
# largest rank's over the smallest's, rank 0's over the other ranks' smallest, and for
# the saving run the time step 2 was blocked by the first checkpoint (its "checkpoint
# ... blocked" line).
# Bounds checked (PASS or FAIL): the largest rank's peak of the saving run falls as the
# ranks grow, within each kind of plan; rank 0's peak is within 1.3x of every other
# rank's, or, where the plan itself gives ranks different memory (a pipeline's stages
# hold different layers), within 1.3x of what the baseline's rank 0 holds over the others.
# Usage: [KINDS="zero3 mesh"] bench/ckpt.sh [BUILD_DIR] [RANKS...]   (default: 1 2 4 8)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=$(cd "${1:-build}" && pwd)
shift || true
ranks=${*:-1 2 4 8}
cc="$build/colossalc"
mpirun="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"
work=$(mktemp -d /tmp/colossalc-bench-ckpt.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores"
"$build/tools/colossalc-mktokens" "$src/data/genesis.txt" tokens.bin > /dev/null
model="$src/models/gpt2.model"
cfg="--set seq=64 --gpu cpu --microbatch-size 1"
megatron="--plan $src/tests/multirank/megatron-tiny.plan.json"
compile() { # NAME NP DP TP PP ZERO [FLAGS]
  local name=$1 np=$2 dp=$3 tp=$4 pp=$5 z=$6
  shift 6
  "$cc" "$model" $cfg --set batch="$dp" --gpus "$np" --dp "$dp" --tp "$tp" --pp "$pp" --zero "$z" "$@" \
    -o "$name" > /dev/null 2>&1
}
# each rank's peak RSS in KiB into rss.R (GNU time, per rank)
runp() { # NP PROGRAM ARGS...
  local np=$1
  shift
  $mpirun -np "$np" sh -c 'exec /usr/bin/time -f %M -o rss.$OMPI_COMM_WORLD_RANK "$0" "$@"' "$@"
}
summary() { # LABEL NP: one line from rss.*, and bounds
  local label=$1 np=$2
  awk -v label="$label" -v np="$np" -v blocked="$3" '
    FNR == 1 { r = FILENAME; sub(/.*rss\./, "", r); v[r] = $1 / 1024; n++ }
    END {
      lo = 1e30; hi = 0; other = 1e30
      for (r in v) { if (v[r] < lo) lo = v[r]; if (v[r] > hi) hi = v[r]; if (r != 0 && v[r] < other) other = v[r] }
      line = ""
      for (r = 0; r < n; r++) line = line sprintf(" %.0f", v[r])
      ok0 = n == 1 || v[0] <= 1.3 * other
      printf "%-22s %2d ranks | peak MiB per rank:%s | largest %.0f | largest/smallest %.2f | rank0/others %.2f %s | blocked %s ms\n",
             label, np, line, hi, hi / lo, n == 1 ? 1 : v[0] / other, ok0 ? "PASS" : "FAIL", blocked
      print hi > "largest"
    }' rss.*
}
verdict=0
ratio0() { awk 'FNR == 1 { r = FILENAME; sub(/.*rss\./, "", r); v[r] = $1; n++ }
  END { o = 1e30; for (r in v) if (r != 0 && v[r] < o) o = v[r]; printf "%.4f", n == 1 ? 1 : v[0] / o }' rss.*; }
for kind in ${KINDS:-zero3 mesh}; do
  prev=""
  for np in $ranks; do
    case $kind/$np in
      zero3/1) compile p 1 1 1 1 0 ;;
      zero3/*) compile p "$np" "$np" 1 1 3 ;;
      mesh/1) continue ;;
      mesh/2) compile p 2 1 2 1 0 $megatron ;;
      mesh/4) compile p 4 1 2 2 0 $megatron ;;
      mesh/8) compile p 8 2 2 2 1 $megatron ;;
      *) continue ;;
    esac
    rm -rf ck rss.*
    args="--data tokens.bin --threads 1"
    runp "$np" ./p $args --steps 2 > base.out 2>&1 || { tail base.out; exit 1; }
    summary "$kind no checkpoint" "$np" "-" | sed 's/ \(PASS\|FAIL\) / (baseline) /' > line && cat line
    base0=$(ratio0)
    rm -f rss.*
    runp "$np" ./p $args --steps 2 --ckpt-dir ck --ckpt-every 1 > save.out 2>&1 || { tail save.out; exit 1; }
    blocked=$(sed -n 's/^checkpoint ck\/ckpt-1 .*blocked \([0-9.]*\) ms.*/\1/p' save.out | head -1)
    summary "$kind save" "$np" "$blocked" > line
    largest=$(cat largest)
    got0=$(ratio0)
    if grep -q FAIL line && awk -v g="$got0" -v b="$base0" 'BEGIN { exit !(g <= 1.3 * b) }'; then
      sed -i "s/ FAIL / PASS (baseline's rank0\/others $base0) /" line
    fi
    cat line
    grep -q FAIL line && verdict=1
    rm -f rss.*
    runp "$np" ./p $args --steps 3 --ckpt-dir ck --resume > load.out 2>&1 || { tail load.out; exit 1; }
    summary "$kind resume" "$np" "-" > line
    got0=$(ratio0)
    if grep -q FAIL line && awk -v g="$got0" -v b="$base0" 'BEGIN { exit !(g <= 1.3 * b) }'; then
      sed -i "s/ FAIL / PASS (baseline's rank0\/others $base0) /" line
    fi
    cat line
    grep -q FAIL line && verdict=1
    if [ -n "$prev" ]; then
      if awk -v a="$prev" -v b="$largest" 'BEGIN { exit !(b < a) }'; then
        echo "  the largest rank's peak while saving falls: $prev -> $largest MiB PASS"
      else
        echo "  the largest rank's peak while saving does not fall: $prev -> $largest MiB FAIL"
        verdict=1
      fi
    fi
    prev=$largest
  done
done
[ $verdict = 0 ] && echo "bench/ckpt.sh: every bound PASS" || echo "bench/ckpt.sh: some bound FAIL"
exit $verdict
