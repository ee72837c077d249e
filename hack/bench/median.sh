#!/usr/bin/env bash
# median.sh TABLE...: the rows of several vs_karpenter tables (hack/bench/scheduling.sh with
# BENCH_REPEAT, one table per run) as one: per catalog and size, the median of the runs'
# Karpenter seconds, of our seconds and of their ratios (each run's own ratio, not the ratio of
# the medians), then every run's ratio in run order. An even number of runs takes the mean of
# the middle two.
set -euo pipefail
[ "$#" -gt 0 ] || { echo "usage: median.sh TABLE..." >&2; exit 2; }
awk -F'|' -v runs="$#" '
function median(list,    v, n, i, j, t) {
  n = split(list, v, " ")
  for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
function trim(s) { gsub(/^ +| +$/, "", s); return s }
$2 ~ /^ *catalog *$/ || $2 ~ /^-+$/ || NF < 7 { next }
{
  key = trim($2) " | " trim($3)
  if (!(key in k)) order[++rows] = key
  ratio = trim($6); sub(/×$/, "", ratio)
  k[key] = k[key] " " trim($4); ours[key] = ours[key] " " trim($5)
  r[key] = r[key] " " ratio; each[key] = each[key] (each[key] == "" ? "" : ", ") ratio "×"
}
END {
  if (rows == 0) { print "median.sh: no table rows" > "/dev/stderr"; exit 1 }
  print "| catalog | pods | Karpenter s (median) | ours s (median) | Karpenter/ours (median) | each run (" runs ") |"
  print "|---|---:|---:|---:|---:|---|"
  for (i = 1; i <= rows; i++) {
    key = order[i]
    printf "| %s | %.3f | %.4f | %.0f× | %s |\n", key, median(k[key]), median(ours[key]), median(r[key]), each[key]
  }
}' "$@"
