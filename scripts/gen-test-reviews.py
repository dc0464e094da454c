#!/usr/bin/env python3
"""Writes the real-shaped AdmissionReview fixtures in tests/data/.

The objects follow what a v1.34 kube-apiserver sends for an Argo CD-managed
Deployment: defaulted fields, managedFields for argocd-controller and kubectl,
the tracking annotation. Run from the repository root; the output is committed.
"""
import copy
import json
import os

OUT = "tests/data"
UID = "5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11"

def deployment():
    container = lambda name, image, port: {
        "name": name, "image": image,
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "REGION", "value": "eu-west-1"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
        "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": port, "scheme": "HTTP"}, "initialDelaySeconds": 5,
                          "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": port, "scheme": "HTTP"}, "timeoutSeconds": 1,
                           "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 3},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/myapp", "readOnly": True}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    fields_container = {".": {}, "f:env": {".": {}, 'k:{"name":"LOG_LEVEL"}': {".": {}, "f:name": {}, "f:value": {}},
                                          'k:{"name":"REGION"}': {".": {}, "f:name": {}, "f:value": {}},
                                          'k:{"name":"POD_NAME"}': {".": {}, "f:name": {}, "f:valueFrom": {".": {}, "f:fieldRef": {}}}},
                        "f:image": {}, "f:imagePullPolicy": {}, "f:livenessProbe": {".": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}},
                        "f:initialDelaySeconds": {}}, "f:name": {}, "f:ports": {".": {}, 'k:{"containerPort":8080,"protocol":"TCP"}': {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                        "f:readinessProbe": {".": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}}},
                        "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                        "f:securityContext": {".": {}, "f:allowPrivilegeEscalation": {}, "f:capabilities": {".": {}, "f:drop": {}}, "f:readOnlyRootFilesystem": {}, "f:runAsNonRoot": {}},
                        "f:volumeMounts": {".": {}, 'k:{"mountPath":"/etc/myapp"}': {".": {}, "f:mountPath": {}, "f:name": {}, "f:readOnly": {}}}}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": "myapp", "namespace": "production", "uid": "e3b0c442-98fc-4c14-9afb-f4c8996fb924",
            "resourceVersion": "481516", "generation": 7, "creationTimestamp": "2026-10-02T09:14:55Z",
            "labels": {"app.kubernetes.io/name": "myapp", "app.kubernetes.io/instance": "myapp",
                       "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/version": "1.4.2"},
            "annotations": {"argocd.argoproj.io/tracking-id": "myapp:apps/Deployment:production/myapp",
                            "deployment.kubernetes.io/revision": "7"},
            "managedFields": [
                {"manager": "argocd-controller", "operation": "Apply", "apiVersion": "apps/v1", "time": "2026-11-20T08:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {
                     "f:metadata": {"f:annotations": {"f:argocd.argoproj.io/tracking-id": {}},
                                    "f:labels": {"f:app.kubernetes.io/instance": {}, "f:app.kubernetes.io/name": {}, "f:app.kubernetes.io/part-of": {}, "f:app.kubernetes.io/version": {}}},
                     "f:spec": {"f:replicas": {}, "f:selector": {}, "f:strategy": {"f:rollingUpdate": {"f:maxSurge": {}, "f:maxUnavailable": {}}},
                                "f:template": {"f:metadata": {"f:labels": {"f:app.kubernetes.io/instance": {}, "f:app.kubernetes.io/name": {}}},
                                               "f:spec": {"f:containers": {'k:{"name":"myapp"}': fields_container, 'k:{"name":"log-shipper"}': fields_container},
                                                          "f:securityContext": {"f:runAsNonRoot": {}, "f:seccompProfile": {"f:type": {}}},
                                                          "f:serviceAccountName": {}, "f:volumes": {'k:{"name":"config"}': {".": {}, "f:configMap": {"f:name": {}}, "f:name": {}}}}}}}},
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1", "time": "2026-11-20T08:01:10Z",
                 "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {
                     "f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}},
                     "f:status": {"f:availableReplicas": {}, "f:conditions": {".": {}, 'k:{"type":"Available"}': {".": {}, "f:lastTransitionTime": {}, "f:lastUpdateTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}},
                                                                              'k:{"type":"Progressing"}': {".": {}, "f:lastTransitionTime": {}, "f:lastUpdateTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}}},
                                  "f:observedGeneration": {}, "f:readyReplicas": {}, "f:replicas": {}, "f:updatedReplicas": {}}}},
            ],
        },
        "spec": {
            "replicas": 3, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "myapp", "app.kubernetes.io/instance": "myapp"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {"creationTimestamp": None, "labels": {"app.kubernetes.io/name": "myapp", "app.kubernetes.io/instance": "myapp"}},
                "spec": {
                    "containers": [container("myapp", "registry.example.com/shop/myapp:1.4.2", 8080),
                                   container("log-shipper", "registry.example.com/platform/log-shipper:3.1.0", 2020)],
                    "volumes": [{"name": "config", "configMap": {"name": "myapp-config", "defaultMode": 420}}],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                    "serviceAccountName": "myapp", "serviceAccount": "myapp", "schedulerName": "default-scheduler",
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                },
            },
        },
        "status": {"observedGeneration": 7, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3, "availableReplicas": 3,
                   "conditions": [{"type": "Available", "status": "True", "lastUpdateTime": "2026-11-20T08:01:10Z",
                                   "lastTransitionTime": "2026-10-02T09:15:20Z", "reason": "MinimumReplicasAvailable",
                                   "message": "Deployment has minimum availability."},
                                  {"type": "Progressing", "status": "True", "lastUpdateTime": "2026-11-20T08:01:10Z",
                                   "lastTransitionTime": "2026-10-02T09:14:55Z", "reason": "NewReplicaSetAvailable",
                                   "message": "ReplicaSet \"myapp-7c9d8f6b5d\" has successfully progressed."}]},
    }

def user(name, groups):
    return {"username": name, "uid": f"uid-{name}", "groups": groups + ["system:authenticated"]}

ALICE = user("alice", ["developers"])

def review(op, resource, obj, old, who=ALICE, sub=None, kind=None, dry_run=False, options=None):
    kind = kind or {"group": "apps", "version": "v1", "kind": "Deployment"}
    req = {
        "uid": UID, "kind": kind, "resource": resource,
        "requestKind": kind, "requestResource": resource,
        "name": (obj or old)["metadata"]["name"], "namespace": "production",
        "operation": op, "userInfo": who, "object": obj, "oldObject": old, "dryRun": dry_run,
        "options": options or {"kind": {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}[op], "apiVersion": "meta.k8s.io/v1"},
    }
    if sub:
        req["subResource"] = sub
        req["requestSubResource"] = sub
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}

def bumped(obj, manager):
    new = copy.deepcopy(obj)
    new["metadata"]["generation"] += 1
    new["metadata"]["managedFields"].append({
        "manager": manager, "operation": "Update", "apiVersion": "apps/v1", "time": "2026-11-29T10:00:00Z",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"myapp"}': {"f:image": {}}}}}}}})
    return new

def write(name, body):
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(body, f, indent=1)
        f.write("\n")

DEPLOY = {"group": "apps", "version": "v1", "resource": "deployments"}
old = deployment()
write("deployment.json", old)

# kubectl set image as alice
new = bumped(old, "kubectl-set")
new["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example.com/shop/myapp:1.5.0-hotfix"
write("deployment-update-image.json", review("UPDATE", DEPLOY, new, old, options={"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-set"}))
write("deployment-update-image-dryrun.json", review("UPDATE", DEPLOY, new, old, dry_run=True))

# kubectl rollout restart: only the restartedAt annotation on the pod template
new = bumped(old, "kubectl-rollout")
new["spec"]["template"]["metadata"]["annotations"] = {"kubectl.kubernetes.io/restartedAt": "2026-11-29T10:00:00Z"}
write("deployment-rollout-restart.json", review("UPDATE", DEPLOY, new, old))

# kubectl delete as alice
write("deployment-delete.json", review("DELETE", DEPLOY, None, old, options={"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "propagationPolicy": "Background"}))

# kubectl scale --replicas=5 as alice: autoscaling/v1 Scale on deployments/scale
def scale(replicas, rv):
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": "myapp", "namespace": "production", "uid": old["metadata"]["uid"],
                         "resourceVersion": rv, "creationTimestamp": old["metadata"]["creationTimestamp"]},
            "spec": {"replicas": replicas},
            "status": {"replicas": 3, "selector": "app.kubernetes.io/instance=myapp,app.kubernetes.io/name=myapp"}}
SCALE = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
write("deployment-scale.json", review("UPDATE", DEPLOY, scale(5, "481516"), scale(3, "481516"), sub="scale", kind=SCALE))

# kubectl create of a ConfigMap carrying Argo CD tracking metadata, as alice
cm = {"apiVersion": "v1", "kind": "ConfigMap",
      "metadata": {"name": "myapp-config", "namespace": "production",
                   "annotations": {"argocd.argoproj.io/tracking-id": "myapp:/ConfigMap:production/myapp-config"},
                   "managedFields": [{"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
                                      "time": "2026-11-29T10:00:00Z", "fieldsType": "FieldsV1",
                                      "fieldsV1": {"f:data": {".": {}, "f:LOG_LEVEL": {}}, "f:metadata": {"f:annotations": {".": {}, "f:argocd.argoproj.io/tracking-id": {}}}}}]},
      "data": {"LOG_LEVEL": "debug"}}
write("configmap-create.json", review("CREATE", {"group": "", "version": "v1", "resource": "configmaps"}, cm, None,
                                      kind={"group": "", "version": "v1", "kind": "ConfigMap"}))
