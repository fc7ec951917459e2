#!/usr/bin/env bash
# The guard on what the analysis costs per message: instructions per
# request/reply pair on each workload of benches/analysis.rs, and per
# request on the replayed traffic of each corpus application
# (fixtures/captures/, `replay:NAME`), counted by callgrind, against
# benches/icount-baseline.tsv. Fails when a workload rises more than 3 %
# above its baseline; notes a fall of 10 % or more. Prints, per
# application, instructions per request and per returned KiB beside a
# plain walk of every BSON element of the same messages (the floor).
#
#   scripts/icount.sh            build, count, compare
#   scripts/icount.sh --update   the same, then rewrite the baseline (commit
#                                it with a message that says why)
#   scripts/icount.sh --target cosmos-ru
#                                every workload under that platform (as
#                                `wirelint --target`), against the same
#                                baseline: what its pricing adds
#
# The build: the analysis benchmark in the dev profile (whose dependencies
# `cargo test` has built already) with wirelint and the crates its
# analysis calls into (bson, simdutf8, ascii, hdrhistogram, lru, crc32c,
# foldhash, itoa)
# optimised (opt-level 3, no debug assertions, 16 code-generation units).
# The counts are thus those of optimised analysis code, not of the release
# binary (whole-program optimisation: too slow to build for every run).
#
# The count: each workload's warm-up, then PAIRS pairs in a function of
# their own (`callgrind_measured`), the only one callgrind counts
# (--toggle-collect); its clock is a counter, so the count is the same on
# every run on the same machine (but for a finding's wall-clock timestamp,
# which costs a few instructions more or less to format). Two workloads at
# a time. The replays: one callgrind run, each application's analysis
# (as `wirelint analyse` runs it) and then its walk in the measured
# function, callgrind's counts split between them (--dump-before).
set -euo pipefail
cd "$(dirname "$0")/.."

BASELINE=benches/icount-baseline.tsv
PAIRS=1000
LIMIT=3     # % above the baseline that fails
NOTE=10     # % below it that suggests lowering it
WORKLOADS=(insert_1kib getmore_app_docs getmore_batch insert_30_docs aggregate_lookup update find find_by_id)
OPTIMISED=(wirelint bson simdutf8 ascii hdrhistogram lru crc32c foldhash itoa)

update=0
target=
case ${1:-} in
  --update) update=1 ;;
  --target)
    case ${2:-} in
      mongodb | cosmos-ru | cosmos-vcore | documentdb) target=$2 ;;
      *) echo "icount: --target takes mongodb, cosmos-ru, cosmos-vcore or documentdb" >&2; exit 2 ;;
    esac ;;
  "") ;;
  *) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac

if ! command -v valgrind >/dev/null 2>&1; then
  echo "icount: valgrind is not installed (Debian: apt-get install valgrind)" >&2
  exit 2
fi

config=()
for p in "${OPTIMISED[@]}"; do
  for kv in opt-level=3 debug=false debug-assertions=false overflow-checks=false codegen-units=16 incremental=false; do
    config+=(--config "profile.dev.package.$p.$kv")
  done
done
bin=$(cargo bench --locked --quiet --profile dev "${config[@]}" --bench analysis --no-run \
  --message-format=json-render-diagnostics |
  sed -n 's/.*"name":"analysis".*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$bin" ] || { echo "icount: no benchmark binary built" >&2; exit 2; }

# The hash tables' seeds (foldhash) come from addresses, the stack's among
# them, which the environment and the program's path move: the benchmark
# runs from a path of fixed length with a fixed environment.
out=$(mktemp -d /tmp/wirelint-icount.XXXXXX)
trap 'rm -rf "$out"' EXIT
cp "$bin" "$out/analysis"
valgrind=$(command -v valgrind)
# count WORKLOAD: writes the instructions of its PAIRS measured pairs.
count() {
  env -i PATH=/usr/bin:/bin ${target:+WIRELINT_TARGET=$target} \
    WIRELINT_CALLGRIND="$PAIRS" WIRELINT_CALLGRIND_ONLY="$1" \
    "$valgrind" --tool=callgrind --toggle-collect='*callgrind_measured*' \
    --callgrind-out-file=/dev/null "$out/analysis" --bench >/dev/null 2>"$out/$1.log" ||
    { echo "icount: $1 failed:" >&2; cat "$out/$1.log" >&2; return 1; }
  grep -oP 'Collected : \K[0-9]+' "$out/$1.log" >"$out/$1"
}
export -f count
export PAIRS out valgrind target
# count_replays: every application's replay, its counts in $out/replay:NAME
# (per request) and the table of figures in $out/replays.
count_replays() {
  (cd "$out" && env -i PATH=/usr/bin:/bin ${target:+WIRELINT_TARGET=$target} WIRELINT_CALLGRIND_REPLAY=1 \
    "$valgrind" --tool=callgrind --toggle-collect='*callgrind_measured*' \
    --dump-before='*replay_boundary*' --callgrind-out-file="$out/cg.replay" \
    "$out/analysis" --bench >"$out/replay.order" 2>"$out/replay.log") ||
    { echo "icount: the replay failed:" >&2; cat "$out/replay.log" >&2; return 1; }
  # Each boundary ends a part: part 1 is what came before the first
  # (nothing is collected there), so line i's measurement is part i+1.
  local i=0
  : >"$out/replays"
  while IFS=$'\t' read -r what name requests returned; do
    i=$((i + 1))
    local part="$out/cg.replay.$((i + 1))"
    local n
    n=$(sed -n 's/^summary: //p; s/^totals: //p' "$part" | head -1)
    printf '%s\t%s\t%s\t%s\t%s\n' "$what" "$name" "$requests" "$returned" "${n:-0}" >>"$out/replays"
  done <"$out/replay.order"
  awk -F'\t' '$1 == "analysis" {printf "%.1f\n", $5 / ($3 > 0 ? $3 : 1) > (dir "/replay:" $2)}' dir="$out" "$out/replays"
}
export -f count_replays
printf '%s\n' "${WORKLOADS[@]}" replays | xargs -P "${WIRELINT_ICOUNT_LANES:-2}" -I{} bash -c \
  'if [ "$1" = replays ]; then count_replays; else count "$1"; fi' _ {}
REPLAYS=()
while IFS=$'\t' read -r what name _; do
  [ "$what" = analysis ] && REPLAYS+=("replay:$name")
done <"$out/replay.order"

rustc=$(rustc -V)
vg=$(valgrind --version)
if [ "$update" -eq 1 ]; then
  {
    echo "# Instructions per request/reply pair of the analysis (benches/analysis.rs's"
    echo "# callgrind mode), and per request of each replayed application (replay:NAME,"
    echo "# fixtures/captures/), the baseline of scripts/icount.sh, which fails when a"
    echo "# workload rises more than $LIMIT % above it. A commit that changes this file"
    echo "# says why."
    echo "# profile: dev, with ${OPTIMISED[*]} at opt-level 3 (scripts/icount.sh)"
    echo "# rustc: $rustc"
    echo "# valgrind: $vg"
    echo "# produced by: scripts/icount.sh --update ($PAIRS pairs after each warm-up, counted alone)"
    printf 'workload\tinstructions_per_pair\n'
    for w in "${WORKLOADS[@]}"; do
      printf '%s\t%s\n' "$w" "$(awk -v c="$(cat "$out/$w")" -v n="$PAIRS" 'BEGIN {printf "%.1f", c / n}')"
    done
    for w in "${REPLAYS[@]}"; do
      printf '%s\t%s\n' "$w" "$(cat "$out/$w")"
    done
  } >"$BASELINE"
  echo "icount: $BASELINE rewritten; commit it with a message that says why" >&2
fi

# The table, and the verdict.
if [ ! -f "$BASELINE" ]; then
  echo "icount: no $BASELINE: scripts/icount.sh --update writes it" >&2
  exit 2
fi
base_rustc=$(sed -n 's/^# rustc: //p' "$BASELINE")
base_vg=$(sed -n 's/^# valgrind: //p' "$BASELINE")
# The replays' figures: per request, per returned KiB, the walk's per KiB.
echo "replayed applications (instructions):"
awk -F'\t' '
  $1 == "analysis" {a[$2] = $5; req[$2] = $3; kib[$2] = ($4 > 0 ? $4 : 1) / 1024; order[++n] = $2}
  $1 == "walk" {w[$2] = $5}
  END {
    printf "%-44s %8s %12s %12s %12s %7s\n", "application", "requests", "per request", "per KiB", "walk per KiB", "x walk"
    for (i = 1; i <= n; i++) {
      k = order[i]
      printf "%-44s %8d %12.0f %12.0f %12.0f %7.1f\n", k, req[k], a[k] / (req[k] > 0 ? req[k] : 1), a[k] / kib[k], w[k] / kib[k], a[k] / (w[k] > 0 ? w[k] : 1)
      all_a += a[k]; all_w += w[k]; all_req += req[k]; all_kib += kib[k]
    }
    printf "%-44s %8d %12.0f %12.0f %12.0f %7.1f\n", "all", all_req, all_a / all_req, all_a / all_kib, all_w / all_kib, all_a / all_w
  }' "$out/replays"
echo
printf '%-44s %12s %12s %8s\n' workload baseline now change
over=() under=()
for w in "${WORKLOADS[@]}" "${REPLAYS[@]}"; do
  if [[ $w == replay:* ]]; then now=$(cat "$out/$w"); else
  now=$(awk -v c="$(cat "$out/$w")" -v n="$PAIRS" 'BEGIN {printf "%.1f", c / n}'); fi
  base=$(awk -F'\t' -v w="$w" '$1 == w {print $2}' "$BASELINE")
  if [ -z "$base" ]; then
    printf '%-44s %12s %12s %8s\n' "$w" "-" "$now" "new"
    over+=("$w (not in the baseline)")
    continue
  fi
  change=$(awk -v a="$base" -v b="$now" 'BEGIN {printf "%+.1f", (b - a) / a * 100}')
  printf '%-44s %12s %12s %7s %%\n' "$w" "$base" "$now" "$change"
  if awk -v c="$change" -v l="$LIMIT" 'BEGIN {exit !(c > l)}'; then over+=("$w ($change %)"); fi
  if awk -v c="$change" -v l="$NOTE" 'BEGIN {exit !(c <= -l)}'; then under+=("$w ($change %)"); fi
done
if [ "$rustc" != "$base_rustc" ] || [ "$vg" != "$base_vg" ]; then
  echo "icount: NOTE: the baseline was measured with $base_rustc and $base_vg;" >&2
  echo "        this machine has $rustc and $vg: counts may differ for that alone." >&2
fi
if [ ${#under[@]} -gt 0 ]; then
  echo "icount: note: ${under[*]} fell by $NOTE % or more: consider lowering the baseline" >&2
  echo "        (scripts/icount.sh --update, in a commit that says why)." >&2
fi
if [ ${#over[@]} -gt 0 ]; then
  echo "icount: FAILED: more than $LIMIT % above the baseline: ${over[*]}." >&2
  echo "        If the rise is intended, run scripts/icount.sh --update and commit" >&2
  echo "        $BASELINE in a commit whose message says why." >&2
  exit 1
fi
echo "icount: every workload within $LIMIT % of the baseline ($PAIRS pairs each, ${#REPLAYS[@]} replayed applications)" >&2
