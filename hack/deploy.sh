#!/usr/bin/env bash
# `make deploy`: the kind cluster up if needed, the project image built and loaded into it,
# manifests/default applied with that image, and the operator's rollout and readiness waited for.
# After a code change the image gets a new tag (hack/build-image.sh), so running this again rolls
# the new image out. `hack/deploy.sh --delete` undoes the apply (make undeploy).
set -euo pipefail
cd "$(dirname "$0")/.."

KIND_CLUSTER="${KIND_CLUSTER:-modelpool}"
NAMESPACE=modelpool-system
# The image name the manifests carry; kustomize replaces it with the image built here.
MANIFEST_IMAGE=ghcr.io/modelpool/controlplane
log() { echo "[deploy] $*" >&2; }
die() { log "error: $*"; exit 1; }

kubectl="$(hack/build-controlplane.sh 2>/dev/null | tail -n 1)/kubectl"
[ -x "$kubectl" ] || die "no kubectl (hack/build-controlplane.sh builds it)"

overlay=$(mktemp -d -p . .deploy-XXXX)
trap 'rm -rf "$overlay"' EXIT

if [ "${1:-}" = "--delete" ]; then
  context="kind-$KIND_CLUSTER"
  printf 'resources:\n  - ../manifests/default\n' >"$overlay/kustomization.yaml"
  "$kubectl" --context "$context" delete -k "$overlay" --ignore-not-found --wait=true >&2 \
    || die "kubectl delete failed (is the cluster up? make kind-up)"
  log "removed everything manifests/default installed (CRDs, and so every pool, with it)"
  exit 0
fi

start=$(date +%s)
context=$(hack/kind-up.sh | tail -n 1)
image=$(hack/build-image.sh | tail -n 1)
tools=$(hack/build-kind-tools.sh 2>/dev/null | tail -n 1)
log "loading $image into the kind node"
"$tools/kind" load docker-image "$image" --name "$KIND_CLUSTER" >&2
cat >"$overlay/kustomization.yaml" <<YAML
resources:
  - ../manifests/default
images:
  - name: $MANIFEST_IMAGE
    newName: ${image%:*}
    newTag: ${image##*:}
YAML
"$kubectl" --context "$context" apply --server-side --force-conflicts -k "$overlay" >&2
log "waiting for the operator's rollout"
"$kubectl" --context "$context" -n "$NAMESPACE" rollout status deployment/modelpool-operator --timeout=300s >&2 \
  || { "$kubectl" --context "$context" -n "$NAMESPACE" logs deployment/modelpool-operator --tail=50 >&2 || true
       die "the operator did not become ready"; }
"$kubectl" --context "$context" -n "$NAMESPACE" wait --for=condition=Available deployment/modelpool-operator --timeout=120s >&2
# Refresh kubectl's discovery cache, so `kubectl get modelpool-all` finds the new category at once.
"$kubectl" --context "$context" api-resources --categories=modelpool-all >/dev/null
log "deployed $image in $(( $(date +%s) - start )) s"
cat <<TEXT
The operator runs in kind cluster '$KIND_CLUSTER' (kubectl context $context).
Next:
  kubectl apply -f manifests/samples/          # a pool of two members and a router
  kubectl get modelpool-all -A                 # everything ModelPool manages
  kubectl -n $NAMESPACE logs deploy/modelpool-operator
  make undeploy / make kind-down               # remove it, then the cluster
TEXT
