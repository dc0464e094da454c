#!/usr/bin/env python3
"""Writes the largest and costliest AdmissionReviews a user with `edit` can
make the apiserver send, for the memory and CPU measurements:

  deployment-env N        CREATE of an Argo CD-tracked Deployment with N env
                          vars, managedFields as the apiserver adds them
                          (N=80000 is ~8 MB, the body limit).
  deployment-env-update N UPDATE of that Deployment (N env vars on each side,
                          so ~2x the body) changing its image.
  configmap-patch N TOOL  UPDATE of a TOOL-managed (flux or argocd) ConfigMap
                          by `kubectl patch` adding N data keys: N drifted
                          paths, each owned by a kubectl manager.

  configmap-tiny N TOOL   the same with the shortest keys (hex) and empty
                          values: the most paths per body byte.

Usage: gen-big-reviews.py KIND N [TOOL] > review.json (compact JSON, as the
apiserver sends it).
"""
import json
import sys

UID = "5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11"
USER = {"username": "alice", "uid": "uid-alice", "groups": ["developers", "system:authenticated"]}


def review(kind, group, resource, name, operation, obj, old=None):
    version = "v1"
    req = {
        "uid": UID,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": name, "namespace": "production", "operation": operation,
        "userInfo": USER, "dryRun": False, "object": obj,
    }
    if old is not None:
        req["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def deployment_env(n):
    env = [{"name": f"VARIABLE_{i:06d}", "value": f"value-{i:06d}"} for i in range(n)]
    fields_env = {f'k:{{"name":"VARIABLE_{i:06d}"}}': {".": {}, "f:name": {}, "f:value": {}} for i in range(n)}
    obj = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": "big", "namespace": "production",
            "annotations": {"argocd.argoproj.io/tracking-id": "myapp:apps/Deployment:production/big"},
            "managedFields": [{
                "manager": "kubectl-create", "operation": "Update", "apiVersion": "apps/v1",
                "time": "2026-11-29T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                    'k:{"name":"app"}': {".": {}, "f:env": dict({".": {}}, **fields_env),
                                         "f:image": {}, "f:name": {}}}}}}},
            }],
        },
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "big"}},
                 "template": {"metadata": {"labels": {"app": "big"}},
                              "spec": {"containers": [{"name": "app", "image": "app:1", "env": env}]}}},
    }
    return review("Deployment", "apps", "deployments", "big", "CREATE", obj)


def deployment_env_update(n):
    old = deployment_env(n)["request"]["object"]
    old["metadata"].update(uid="6a1f0c3e-2222-4c14-9afb-f4c8996fb924", resourceVersion="4242")
    new = json.loads(json.dumps(old))
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "app:2"
    return review("Deployment", "apps", "deployments", "big", "UPDATE", new, old)


def configmap_patch(n, tool, key=lambda i: f"key-{i:06d}", value=lambda i: f"value-{i:06d}"):
    if tool == "flux":
        labels = {"kustomize.toolkit.fluxcd.io/name": "apps",
                  "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}
        annotations = {}
        manager = {"manager": "kustomize-controller", "operation": "Apply"}
        owned_meta = {"f:labels": {"f:kustomize.toolkit.fluxcd.io/name": {},
                                   "f:kustomize.toolkit.fluxcd.io/namespace": {}}}
    else:
        labels = {}
        annotations = {"argocd.argoproj.io/tracking-id": "myapp:/ConfigMap:production/settings"}
        manager = {"manager": "argocd-controller", "operation": "Apply"}
        owned_meta = {"f:annotations": {"f:argocd.argoproj.io/tracking-id": {}}}
    meta = {"name": "settings", "namespace": "production", "uid": "6a1f0c3e-1111-4c14-9afb-f4c8996fb924",
            "resourceVersion": "4242"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    git = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"LOG_LEVEL": "info"}}
    applied = dict(manager, apiVersion="v1", time="2026-11-29T09:00:00Z", fieldsType="FieldsV1",
                   fieldsV1={"f:data": {"f:LOG_LEVEL": {}}, "f:metadata": owned_meta})
    old = json.loads(json.dumps(git))
    old["metadata"]["managedFields"] = [applied]
    new = json.loads(json.dumps(old))
    keys = {key(i): value(i) for i in range(n)}
    new["data"].update(keys)
    new["metadata"]["managedFields"].append({
        "manager": "kubectl-patch", "operation": "Update", "apiVersion": "v1",
        "time": "2026-11-29T10:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {f"f:{k}": {} for k in keys}}})
    return review("ConfigMap", "", "configmaps", "settings", "UPDATE", new, old)


def configmap_annotated(n):
    """An Argo CD ConfigMap whose stored ignore-differences annotation lists n
    pointers of 125 segments each (32 is the most driftguard reads, in its
    8 KiB), and a patch."""
    out = configmap_patch(1, "argocd")
    text = "jsonPointers: [" + ", ".join(["/x" * 125] * n) + "]\n"
    for side in ("object", "oldObject"):
        out["request"][side]["metadata"]["annotations"]["argocd.argoproj.io/ignore-differences"] = text
    return out


def main():
    kind, n = sys.argv[1], int(sys.argv[2])
    if kind == "deployment-env":
        out = deployment_env(n)
    elif kind == "deployment-env-update":
        out = deployment_env_update(n)
    elif kind == "configmap-tiny":
        out = configmap_patch(n, sys.argv[3] if len(sys.argv) > 3 else "flux",
                              key=lambda i: format(i, "x"), value=lambda i: "")
    elif kind == "configmap-patch":
        out = configmap_patch(n, sys.argv[3] if len(sys.argv) > 3 else "flux")
    elif kind == "configmap-annotated":
        out = configmap_annotated(n)
    else:
        sys.exit(f"unknown kind {kind}")
    json.dump(out, sys.stdout, separators=(",", ":"))


if __name__ == "__main__":
    main()
