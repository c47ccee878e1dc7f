#!/usr/bin/env bash
# What a mpitron process costs before it does anything: `mpitron version` and `mpitron plan
# jobs/tiny.toml`, median wall time of 15 runs and peak RSS, for each binary named (same run, same
# machine, so that two builds compare fairly).
#   bash bench/startup/startup.sh OUT.md BINARY...
# bench/results/cuda_plugin_startup.md: a CUDA build before and after the CUDA backend became a
# library of its own (libmpitron-cuda.so, loaded only where a GPU driver is).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1
shift
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
measure() {  # binary args... -> "median_s max_rss_mb"
  local t r rss=0 times=() f
  f=$(mktemp)
  for _ in $(seq 15); do
    /usr/bin/time -o "$f" -f '%e %M' "$@" >/dev/null 2>&1
    read -r t r <"$f"
    times+=("$t")
    [ "$r" -gt "$rss" ] && rss=$r
  done
  rm -f "$f"
  printf '%s %d' "$(printf '%s\n' "${times[@]}" | median)" $((rss / 1024))
}
{
  echo "# mpitron process start-up: \`version\` and \`plan jobs/tiny.toml\`"
  echo
  echo "$(date -u +%F), $cpu, $(nproc) cores; median of 15 runs, peak RSS. \`bash bench/startup/startup.sh\`."
  echo
  echo "| binary | what it links | version s | version RSS MB | plan s | plan RSS MB |"
  echo "|---|---|---:|---:|---:|---:|"
  for bin in "$@"; do
    links=$(ldd "$bin" | { grep -oE 'lib(cublasLt|cudnn|nccl)[^ ]*' || true; } | sort -u | tr '\n' ' ')
    read -r vs vr <<<"$(measure "$bin" version)"
    read -r ps pr <<<"$(measure "$bin" plan jobs/tiny.toml)"
    echo "| $bin | ${links:-no CUDA library} | $vs | $vr | $ps | $pr |"
  done
} | tee "$out"
