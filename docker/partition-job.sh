#!/bin/sh
# One-shot partitioner job (compose service `partitioner`, Helm Job `<release>-partitioner`).
#
# Env (defaults in brackets):
#   ARGOSY_INPUT             graph file to partition; if unset, a demo graph is generated [unset]
#   ARGOSY_DEMO_NODES        nodes of the generated demo graph [20000]
#   ARGOSY_STORE             store directory to write, on the shared volume [/data/store]
#   ARGOSY_PARTS             number of partitions K [4]
#   ARGOSY_PARTITION_METHOD  grem | random | fennel | ldg | hash | metis [grem]
#   ARGOSY_MAX_EDGE_BALANCE  also cap each part's edges at X times the mean, e.g. 1.1 [unset: off]
#   ARGOSY_RANDOM_FEATURES   DIM random features for a graph WITHOUT features (systems tests only;
#                            a graph without features is otherwise an error) [unset]
#   ARGOSY_REPARTITION       1 = rewrite an existing store; 0 = keep it if it exists [0]
#   ARGOSY_READY_FILE        written after success, so a waiting submit job knows the store is
#                            final (the Helm chart uses one file per release revision) [unset]
set -eu
store=${ARGOSY_STORE:-/data/store}
input=${ARGOSY_INPUT:-}
if [ -f "$store/manifest.json" ] && [ "${ARGOSY_REPARTITION:-0}" != 1 ]; then
    echo "partition-job: $store already holds a store; keeping it (set ARGOSY_REPARTITION=1 to rewrite)"
    argosy inspect "$store"
    if [ -n "${ARGOSY_READY_FILE:-}" ]; then date > "$ARGOSY_READY_FILE"; fi
    exit 0
fi
if [ -z "$input" ]; then
    input=$(dirname "$store")/demo-graph.npz
    if [ ! -f "$input" ]; then
        echo "partition-job: no ARGOSY_INPUT given; generating a demo graph at $input"
        argosy generate --nodes "${ARGOSY_DEMO_NODES:-20000}" --out "$input"
    fi
fi
set -- "$input" --parts "${ARGOSY_PARTS:-4}" --method "${ARGOSY_PARTITION_METHOD:-grem}" \
    --out "$store" --overwrite
if [ -n "${ARGOSY_MAX_EDGE_BALANCE:-}" ]; then set -- "$@" --max-edge-balance "$ARGOSY_MAX_EDGE_BALANCE"; fi
if [ -n "${ARGOSY_RANDOM_FEATURES:-}" ]; then set -- "$@" --random-features "$ARGOSY_RANDOM_FEATURES"; fi
python -m argosy.services.partitioner "$@"
if [ -n "${ARGOSY_READY_FILE:-}" ]; then date > "$ARGOSY_READY_FILE"; fi
