#!/bin/sh
# One-shot partitioner job (compose service `partitioner`, Helm Job `<release>-partitioner`).
#
# Env (defaults in brackets):
#   ARGOSY_INPUT             graph file to partition (compose: put it in ./input on the host, it is
#                            /input here); if unset, a demo graph is generated [unset]
#   ARGOSY_FEATURES, ARGOSY_LABELS, ARGOSY_TRAIN_MASK, ARGOSY_VAL_MASK, ARGOSY_TEST_MASK
#                            side files with the node data of an edge-list graph [unset]
#   ARGOSY_PARTITION_ARGS    any other `argosy partition` flags, e.g. "--directed --seed 3" [unset]
#   ARGOSY_DEMO_NODES        nodes of the generated demo graph [20000]
#   ARGOSY_STORE             store directory to write, on the shared volume [/data/store]
#   ARGOSY_PARTS             number of partitions K [4]
#   ARGOSY_PARTITION_METHOD  grem | random | fennel | ldg | hash | metis [grem]
#   ARGOSY_MAX_EDGE_BALANCE  also cap each part's edges at X times the mean, e.g. 1.1 [unset: off]
#   ARGOSY_RANDOM_FEATURES   DIM random features for a graph WITHOUT features (systems tests only;
#                            a graph without features is otherwise an error) [unset]
#   ARGOSY_REPARTITION       1 = rewrite an existing store even if it was built from this input [0]
#   ARGOSY_READY_FILE        written after success, so a waiting submit job knows the store is
#                            final (the Helm chart uses one file per release revision) [unset]
#
# The store remembers what it was built from ($store.input: the input files' SHA-256 and every
# partitioning setting). An existing store is kept only when that matches this run's; a store built
# from another input or with other settings is rebuilt, and the log names both: a job never
# trains a graph other than the one asked for.
set -eu
store=${ARGOSY_STORE:-/data/store}
input=${ARGOSY_INPUT:-}
record="$store.input"
if [ -z "$input" ]; then
    input=$(dirname "$store")/demo-graph-${ARGOSY_DEMO_NODES:-20000}.npz
    if [ ! -f "$input" ]; then
        echo "partition-job: no ARGOSY_INPUT given; generating a demo graph at $input"
        argosy generate --nodes "${ARGOSY_DEMO_NODES:-20000}" --out "$input.tmp.npz"
        mv "$input.tmp.npz" "$input"
    fi
fi
set -- "$input" --parts "${ARGOSY_PARTS:-4}" --method "${ARGOSY_PARTITION_METHOD:-grem}" --out "$store" --overwrite
side=""
add_side() { # add_side FLAG FILE: pass a side file on, and count it in the fingerprint
    if [ -n "$2" ]; then
        case "$2" in *" "*) echo "partition-job: $1 '$2': paths with spaces are not supported here; rename the file" >&2; exit 2;; esac
        if [ ! -e "$2" ]; then echo "partition-job: $1 $2: no such file (is it in the input directory?)" >&2; exit 2; fi
        set_args="$set_args $1 $2"; side="$side $2"
    fi
}
set_args=""
add_side --features "${ARGOSY_FEATURES:-}"
add_side --labels "${ARGOSY_LABELS:-}"
add_side --train-mask "${ARGOSY_TRAIN_MASK:-}"
add_side --val-mask "${ARGOSY_VAL_MASK:-}"
add_side --test-mask "${ARGOSY_TEST_MASK:-}"
if [ ! -e "$input" ]; then echo "partition-job: ARGOSY_INPUT=$input: no such file or directory" >&2; exit 2; fi
# shellcheck disable=SC2086
set -- "$@" $set_args
if [ -n "${ARGOSY_MAX_EDGE_BALANCE:-}" ]; then set -- "$@" --max-edge-balance "$ARGOSY_MAX_EDGE_BALANCE"; fi
if [ -n "${ARGOSY_RANDOM_FEATURES:-}" ]; then set -- "$@" --random-features "$ARGOSY_RANDOM_FEATURES"; fi
# shellcheck disable=SC2086
set -- "$@" ${ARGOSY_PARTITION_ARGS:-}

# What this run would build from: file contents (not names or dates) and every setting.
if [ -d "$input" ]; then sums=$(find "$input" -type f | sort | xargs sha256sum | sha256sum); else sums=$(sha256sum "$input"); fi
# shellcheck disable=SC2086
want=$(printf '%s\n' "$sums" ${side:+$(sha256sum $side)} "settings: $*" | sha256sum | cut -c1-16)
want_line="$want $input$side (${ARGOSY_PARTS:-4} parts, ${ARGOSY_PARTITION_METHOD:-grem})"
if [ -f "$store/manifest.json" ]; then
    have_line=$(cat "$record" 2>/dev/null || echo "unknown input (a store without $record)")
    if [ "${have_line%% *}" = "$want" ] && [ "${ARGOSY_REPARTITION:-0}" != 1 ]; then
        echo "partition-job: $store was built from this input and these settings ($want_line); keeping it"
        argosy inspect "$store"
        if [ -n "${ARGOSY_READY_FILE:-}" ]; then date > "$ARGOSY_READY_FILE"; fi
        exit 0
    fi
    if [ "${have_line%% *}" != "$want" ]; then
        echo "partition-job: $store was built from $have_line, but this job asks for $want_line: rebuilding it"
    else
        echo "partition-job: ARGOSY_REPARTITION=1: rebuilding $store"
    fi
fi
rm -f "$record"
python -m argosy.services.partitioner "$@"
echo "$want_line" > "$record"
if [ -n "${ARGOSY_READY_FILE:-}" ]; then date > "$ARGOSY_READY_FILE"; fi
