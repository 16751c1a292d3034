#!/usr/bin/env bash
# Build Argosy's role images, tag them for your registry and push them (what the Helm chart pulls:
# <registry>/<repository>/<role>:<tag>, values image.registry / image.repository / image.tag).
#
#   bash ci/push_images.sh --registry REG [--tag TAG] [--repository argosy] [--cpu] [--offload]
#                          [--extras pyg] [--no-push] [--dry-run]
#
#   --registry REG   e.g. us-central1-docker.pkg.dev/PROJECT/REPO (GKE), ACCOUNT.dkr.ecr.REGION.amazonaws.com
#                    (EKS), NAME.azurecr.io (AKS), ghcr.io/OWNER; log in first (gcloud auth configure-docker,
#                    aws ecr get-login-password | docker login, az acr login, docker login)
#   --tag TAG        default: the chart's appVersion (k8s/argosy/Chart.yaml)
#   --cpu            the trainer with CPU torch on a slim base, tagged TAG-cpu (values image.trainerTagSuffix:
#                    "-cpu"); default: the CUDA trainer (nvidia/cuda base, PyPI's CUDA torch), tagged TAG
#   --offload        also the offload image (values offload.enabled)
#   --extras pyg     optional-dependency groups for the trainer (PyTorch Geometric models)
#   --no-push        build and tag only;  --dry-run: print the commands, run nothing
# Environment: ARGOSY_BASE_IMAGE (default python:3.11-slim), ARGOSY_TRAINER_BASE_IMAGE (default
# nvidia/cuda:12.8.1-runtime-ubuntu24.04), extra `docker build` flags in DOCKER_BUILD_FLAGS (e.g.
# "--platform linux/amd64" on an ARM laptop). Layers shared by the roles are built once (docker cache).
set -euo pipefail
cd "$(dirname "$0")/.."
registry="" tag="" repo=argosy cpu=0 offload=0 extras="" push=1 dry=0
while [ $# -gt 0 ]; do
    case "$1" in
        --registry) registry=${2%/}; shift ;;
        --tag) tag=$2; shift ;;
        --repository) repo=$2; shift ;;
        --cpu) cpu=1 ;;
        --offload) offload=1 ;;
        --extras) extras=$2; shift ;;
        --no-push) push=0 ;;
        --dry-run) dry=1 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "push_images: unknown argument $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done
[ -n "$registry" ] || { echo "push_images: --registry is required (where the cluster pulls from)" >&2; exit 64; }
[ -n "$tag" ] || tag=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' k8s/argosy/Chart.yaml)
base=${ARGOSY_BASE_IMAGE:-python:3.11-slim}
gpu_base=${ARGOSY_TRAINER_BASE_IMAGE:-nvidia/cuda:12.8.1-runtime-ubuntu24.04}
run() { echo "+ $*"; [ "$dry" = 1 ] || "$@"; }
build() { # build ROLE REF BUILD-ARGS...
    local role=$1 ref=$2; shift 2
    # shellcheck disable=SC2086
    run docker build -f docker/Dockerfile ${DOCKER_BUILD_FLAGS:-} --build-arg ROLE="$role" "$@" -t "$ref" .
    refs+=("$ref")
}
refs=()
for role in partitioner sampler loader; do
    build "$role" "$registry/$repo/$role:$tag" --build-arg BASE_IMAGE="$base"
done
if [ "$cpu" = 1 ]; then
    build trainer "$registry/$repo/trainer:$tag-cpu" --build-arg BASE_IMAGE="$base" --build-arg EXTRAS="$extras"
else
    build trainer "$registry/$repo/trainer:$tag" --build-arg BASE_IMAGE="$gpu_base" --build-arg TORCH_INDEX_URL= \
        --build-arg EXTRAS="$extras"
fi
[ "$offload" = 1 ] && build offload "$registry/$repo/offload:$tag" --build-arg BASE_IMAGE="$base"
if [ "$push" = 1 ]; then
    for ref in "${refs[@]}"; do run docker push "$ref"; done
fi
echo "push_images: ${#refs[@]} images ($([ "$push" = 1 ] && echo pushed || echo not pushed)): ${refs[*]}"
echo "push_images: helm install ... --set image.registry=$registry --set image.repository=$repo --set image.tag=$tag$([ "$cpu" = 1 ] && echo ' --set image.trainerTagSuffix=-cpu')"
