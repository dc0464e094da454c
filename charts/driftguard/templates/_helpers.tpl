{{/* Resource names. nameOverride and fullnameOverride change names only: the
     labels keep app.kubernetes.io/name=driftguard, which the plugin finds it by. */}}
{{- define "driftguard.fullname" -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if .Values.fullnameOverride }}{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains $name .Release.Name }}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}{{ printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}{{ end }}
{{- end -}}

{{- define "driftguard.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "driftguard.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Which certificate source; contradictory values fail the install. */}}
{{- define "driftguard.certMode" -}}
{{- $c := .Values.certificates -}}
{{- $provided := or $c.provided.cert $c.provided.key $c.provided.ca -}}
{{- if and $c.certManager.enabled $provided -}}
{{- fail "certificates: choose certManager.enabled or provided PEMs, not both" -}}
{{- end -}}
{{- if and $provided (not (and $c.provided.cert $c.provided.key $c.provided.ca)) -}}
{{- fail "certificates.provided needs cert, key and ca together" -}}
{{- end -}}
{{- if $c.certManager.enabled }}certManager{{ else if $provided }}provided{{ else }}generated{{ end -}}
{{- end -}}

{{/* CEL: false for the policy's controller and trusted identities (exact names and prefix* globs; other globs are left to driftguard). */}}
{{- define "driftguard.matchExpression" -}}
{{- $exact := list -}}{{- $prefixes := list -}}{{- $gexact := list -}}{{- $gprefixes := list -}}
{{- range $ids := list .Values.policy.controllers .Values.policy.trusted -}}
{{- range $u := ($ids.users | default list) -}}
{{- if regexMatch "[*?\\[\\]{}\\\\]" (trimSuffix "*" $u) }}{{/* other globs: driftguard judges them */}}{{ else if hasSuffix "*" $u }}{{ $prefixes = append $prefixes (trimSuffix "*" $u) }}{{ else }}{{ $exact = append $exact $u }}{{ end -}}
{{- end -}}
{{- range $g := ($ids.groups | default list) -}}
{{- if regexMatch "[*?\\[\\]{}\\\\]" (trimSuffix "*" $g) }}{{ else if hasSuffix "*" $g }}{{ $gprefixes = append $gprefixes (trimSuffix "*" $g) }}{{ else }}{{ $gexact = append $gexact $g }}{{ end -}}
{{- end -}}
{{- end -}}
{{- include "driftguard.refuseSkipAll" (list $exact $prefixes $gexact $gprefixes) -}}
{{- $terms := list -}}
{{- if $exact }}{{ $terms = append $terms (printf "request.userInfo.username in [%s]" (include "driftguard.celList" $exact)) }}{{ end -}}
{{- range $p := $prefixes }}{{ $terms = append $terms (printf "request.userInfo.username.startsWith(%s)" (include "driftguard.celString" $p)) }}{{ end -}}
{{- if $gexact }}{{ $terms = append $terms (printf "(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in [%s]))" (include "driftguard.celList" $gexact)) }}{{ end -}}
{{- range $p := $gprefixes }}{{ $terms = append $terms (printf "(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g.startsWith(%s)))" (include "driftguard.celString" $p)) }}{{ end -}}
{{- if $terms }}!({{ join " || " $terms }}){{ end -}}
{{- end -}}

{{/* driftguard refuses, at load, a controllers or trusted pattern that covers
any user, the unauthenticated user or a service account of a namespace it does
not name (src/policy/identity_traps.rs); its pods would then not start while
these conditions skip those writes inside the apiserver. So the chart refuses
the ones it renders into CEL (exact names and prefix* globs) against the same
probe identities; tests/chart.rs checks no rendered condition skips one. */}}
{{- define "driftguard.refuseSkipAll" -}}
{{- $exact := index . 0 -}}{{- $prefixes := index . 1 -}}{{- $gexact := index . 2 -}}{{- $gprefixes := index . 3 -}}
{{- $sa := "system:serviceaccount:" -}}{{- $sas := "system:serviceaccounts:" -}}
{{- $why := "policy.controllers / policy.trusted: `%s` would make the webhooks skip %s; driftguard refuses such a policy at load (name the identities, and the namespaces of service accounts)" -}}
{{- if has "system:anonymous" $exact }}{{ fail (printf $why "system:anonymous" "the unauthenticated user") }}{{ end -}}
{{- range $p := $prefixes -}}
{{- if or (hasPrefix $p $sa) (hasPrefix $p "system:anonymous") }}{{ fail (printf $why (printf "%s*" $p) "every user or every service account") }}{{ end -}}
{{- if and (hasPrefix $sa $p) (not (contains ":" (trimPrefix $sa $p))) }}{{ fail (printf $why (printf "%s*" $p) "that service account in every namespace the glob matches") }}{{ end -}}
{{- end -}}
{{- range $g := list "system:authenticated" "system:unauthenticated" "system:serviceaccounts" -}}
{{- if has $g $gexact }}{{ fail (printf $why $g "every member of that group") }}{{ end -}}
{{- range $p := $gprefixes }}{{ if or (hasPrefix $p $g) (hasPrefix $sas $p) }}{{ fail (printf $why (printf "%s*" $p) "every member of a built-in group") }}{{ end }}{{ end -}}
{{- end -}}
{{- end -}}

{{- define "driftguard.celString" -}}
'{{ . | replace "\\" "\\\\" | replace "'" "\\'" }}'
{{- end -}}

{{- define "driftguard.celList" -}}
{{- $quoted := list -}}{{- range . }}{{ $quoted = append $quoted (include "driftguard.celString" .) }}{{ end -}}{{ join ", " $quoted }}
{{- end -}}

{{/*
The webhooks' matchConditions: the same text as `driftguard register` builds
(src/cluster/rules.rs; tests/chart.rs compares them for several policies).
Mutating adds one condition to the validating ones.
*/}}
{{- define "driftguard.matchConditions" -}}
{{ include "driftguard.kindAndIdentityConditions" . }}
- name: only-gitops-managed-objects
  expression: {{ include "driftguard.managedExpression" . | quote }}
{{- end -}}

{{- define "driftguard.kindAndIdentityConditions" -}}
{{- $w := .Values.webhook -}}
- name: exclude-unmanaged-kinds
  expression: {{ printf "!(request.resource.group in [%s] || (request.resource.group + '/' + request.resource.resource) in [%s])" (include "driftguard.celList" $w.excludedGroups) (include "driftguard.celList" $w.excludedResources) | quote }}
{{- with include "driftguard.matchExpression" . }}
- name: skip-gitops-and-trusted-identities
  expression: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* CEL for the creates webhook (plannedCreates: guard): a CREATE of an
     object itself without tracking metadata; empty when not guarded. */}}
{{- define "driftguard.createsExpression" -}}
{{- if ne (.Values.policy.plannedCreates | default "guard") "ignore" -}}
{{- with include "driftguard.carries" (dict "root" . "object" "object") -}}
(request.operation == 'CREATE' && (!has(request.subResource) || request.subResource == '')) && !{{ . }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* CEL: scale writes, scaler (HPA, ScaledObject) writes, a namespace labelled driftguard.io/ignore=true, with a detector on namespace and CRD DELETEs (a destination, or what they delete with them), and objects whose stored or incoming version carries tracking metadata of an enabled detector. */}}
{{- define "driftguard.managedExpression" -}}
{{- $gitops := .Values.policy.gitops | default dict -}}
{{- $argo := $gitops.argocd | default dict -}}
{{- $flux := $gitops.flux | default dict -}}
{{- $argoOn := true -}}{{- if hasKey $argo "enabled" }}{{ $argoOn = $argo.enabled }}{{ end -}}
{{- $fluxOn := true -}}{{- if hasKey $flux "enabled" }}{{ $fluxOn = $flux.enabled }}{{ end -}}
{{- $terms := list "(has(request.subResource) && request.subResource == 'scale')" "(request.operation != 'DELETE' && (!has(request.subResource) || request.subResource == '') && ((request.resource.group == 'autoscaling' && request.resource.resource == 'horizontalpodautoscalers') || (request.resource.group == 'keda.sh' && request.resource.resource == 'scaledobjects')))" "(request.resource.group == '' && request.resource.resource == 'namespaces' && object != null && has(object.metadata.labels) && 'driftguard.io/ignore' in object.metadata.labels && object.metadata.labels['driftguard.io/ignore'] == 'true' && !(oldObject != null && has(oldObject.metadata.labels) && 'driftguard.io/ignore' in oldObject.metadata.labels && oldObject.metadata.labels['driftguard.io/ignore'] == 'true'))" -}}
{{- if or $argoOn $fluxOn }}{{ $terms = concat $terms (list "(request.operation == 'DELETE' && request.resource.group == '' && request.resource.resource == 'namespaces')" "(request.operation == 'DELETE' && request.resource.group == 'apiextensions.k8s.io' && request.resource.resource == 'customresourcedefinitions')") }}{{ end -}}
{{- range $o := list "oldObject" "object" -}}
{{- with include "driftguard.carries" (dict "root" $ "object" $o) }}{{ $terms = append $terms . }}{{ end -}}
{{- end -}}
{{- join " || " $terms -}}
{{- end -}}

{{/* CEL: the object ("oldObject" or "object") carries tracking metadata an enabled detector could claim it by; empty with every detector off. The instance label counts only without Helm's release annotation (not empty) beside it: the decision never claims a Helm release's objects for Argo CD. */}}
{{- define "driftguard.carries" -}}
{{- $o := .object -}}
{{- $gitops := .root.Values.policy.gitops | default dict -}}
{{- $argo := $gitops.argocd | default dict -}}
{{- $flux := $gitops.flux | default dict -}}
{{- $annotations := list -}}{{- $labels := list -}}{{- $instance := "" -}}
{{- $argoOn := true -}}{{- if hasKey $argo "enabled" }}{{ $argoOn = $argo.enabled }}{{ end -}}
{{- if $argoOn -}}
{{- $annotations = append $annotations ($argo.trackingAnnotation | default "argocd.argoproj.io/tracking-id") -}}
{{- $instance = "app.kubernetes.io/instance" -}}{{- if hasKey $argo "instanceLabel" }}{{ $instance = $argo.instanceLabel }}{{ end -}}
{{- end -}}
{{- $fluxOn := true -}}{{- if hasKey $flux "enabled" }}{{ $fluxOn = $flux.enabled }}{{ end -}}
{{- if $fluxOn }}{{ $labels = concat $labels (list "kustomize.toolkit.fluxcd.io/name" "helm.toolkit.fluxcd.io/name") }}{{ end -}}
{{- $carries := list -}}
{{- range $section := list "annotations" "labels" -}}
{{- $keys := ternary $annotations $labels (eq $section "annotations") -}}
{{- if $keys -}}
{{- $any := list -}}
{{- range $k := $keys }}{{ $any = append $any (printf "%s in %s.metadata.%s" (include "driftguard.celString" $k) $o $section) }}{{ end -}}
{{- $carries = append $carries (printf "(has(%s.metadata.%s) && (%s))" $o $section (join " || " $any)) -}}
{{- end -}}
{{- end -}}
{{- if $instance -}}
{{- $helm := printf "(has(%s.metadata.annotations) && 'meta.helm.sh/release-name' in %s.metadata.annotations && %s.metadata.annotations['meta.helm.sh/release-name'] != '')" $o $o $o -}}
{{- $carries = append $carries (printf "(has(%s.metadata.labels) && %s in %s.metadata.labels && !%s)" $o (include "driftguard.celString" $instance) $o $helm) -}}
{{- end -}}
{{- if $carries }}{{ printf "(%s != null && (%s))" $o (join " || " $carries) }}{{ end -}}
{{- end -}}

{{/* CEL: the mutating webhook only where it may patch (warn mode, or precision ownedFields). */}}
{{- define "driftguard.patchExpression" -}}
{{- $p := .Values.policy -}}
{{- $writes := "request.operation != 'DELETE' && (!has(request.subResource) || request.subResource == '')" -}}
{{- $namespaces := list (dict "names" (list "dev-*") "mode" "warn") -}}
{{- if hasKey $p "namespaces" }}{{ $namespaces = $p.namespaces | default list }}{{ end -}}
{{- $regexes := list -}}{{- $plain := true -}}
{{- range $entry := $namespaces -}}
{{- if eq $entry.mode "warn" -}}
{{- range $g := $entry.names -}}
{{- if regexMatch "[\\[\\]{}\\\\]" $g }}{{ $plain = false }}{{ else }}{{ $regexes = append $regexes (regexQuoteMeta $g | replace "\\*" ".*" | replace "\\?" ".") }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if or (eq ($p.mode | default "enforce") "warn") (eq ($p.precision | default "all") "ownedFields") (not $plain) -}}
{{ $writes }}
{{- else -}}
{{- $mayWarn := list "(oldObject != null && has(oldObject.metadata.annotations) && 'driftguard.io/mode' in oldObject.metadata.annotations && oldObject.metadata.annotations['driftguard.io/mode'] == 'warn')" -}}
{{- if $regexes }}{{ $mayWarn = append $mayWarn (printf "(has(request.namespace) && request.namespace.matches(%s))" (include "driftguard.celString" (printf "^(%s)$" (join "|" $regexes)))) }}{{ end -}}
{{ printf "%s && (%s)" $writes (join " || " $mayWarn) }}
{{- end -}}
{{- end -}}

{{/*
The generated certificates (neither cert-manager nor provided PEMs), as YAML:
base64 PEMs and the values recorded on the Secrets. The CA lives in
<fullname>-ca, the serving certificate in <fullname>-tls; both are read back
with `lookup` and change only when asked or needed:
- the serving certificate is issued again, from the same CA, when missing,
  when certificates.generated.reissue differs from the value recorded on its
  Secret, or when its names (Service, webhook.url's host) or its CA change.
  The caBundle stays the same, so the apiserver trusts the old and the new
  one while the kubelet catches up.
- the CA is replaced when certificates.generated.caRotation differs from the
  value recorded on its Secret, or when no CA key is stored (the layout
  before the CA had a Secret of its own, or a deleted CA Secret). That
  render's caBundle holds the new CA and the one it replaces, so the serving
  certificate still mounted and the new one both verify; the next render (any
  upgrade) leaves the old CA out.
Without a cluster to look up (`helm template`, Argo CD) everything is new at
each render: see driftguard.lookupWorks. Memoized so that every template of
one render sees the same material.
*/}}
{{- define "driftguard.generatedPair" -}}
{{- if not (hasKey .Values "_generated") -}}
{{- $fullname := include "driftguard.fullname" . -}}
{{- $g := .Values.certificates.generated | default dict -}}
{{- if and (not (include "driftguard.lookupWorks" .)) (.Capabilities.APIVersions.Has "argoproj.io/v1alpha1") (not $g.allowWithoutLookup) -}}
{{- fail "certificates: rendered without cluster access (helm template, Argo CD) for a cluster with Argo CD: the generated certificate would be a new CA at every render, and each sync would break the webhook until the kubelet caught up. Use certificates.certManager.enabled or certificates.provided, or set certificates.generated.allowWithoutLookup=true (docs/install.md)" -}}
{{- end -}}
{{- $caSecret := lookup "v1" "Secret" .Release.Namespace (printf "%s-ca" $fullname) | default dict -}}
{{- $tlsSecret := lookup "v1" "Secret" .Release.Namespace (printf "%s-tls" $fullname) | default dict -}}
{{- /* Empty asks for nothing: an upgrade without the value (no --reuse-values) keeps the recorded one. */ -}}
{{- $rotation := toString ($g.caRotation | default "") | default (dig "metadata" "annotations" "driftguard.io/ca-rotation" "" $caSecret) -}}
{{- $reissue := toString ($g.reissue | default "") | default (dig "metadata" "annotations" "driftguard.io/reissue" "" $tlsSecret) -}}
{{- $caData := $caSecret.data | default dict -}}
{{- $tlsData := $tlsSecret.data | default dict -}}
{{- $storedCa := and (index $caData "tls.crt") (index $caData "tls.key") -}}
{{- $ca := dict -}}{{- $previous := "" -}}
{{- if and $storedCa (eq (dig "metadata" "annotations" "driftguard.io/ca-rotation" "" $caSecret) $rotation) -}}
{{- $ca = buildCustomCert (index $caData "tls.crt") (index $caData "tls.key") -}}
{{- else -}}
{{- /* Named by its time of issue: the CAs of a rotation's caBundle differ in name, not only in key. */ -}}
{{- $ca = genCA (printf "%s-ca %s" $fullname (dateInZone "2006-01-02T15:04:05Z" (now) "UTC")) 3650 -}}
{{- if $storedCa }}{{ $previous = index $caData "tls.crt" | b64dec }}{{ else if index $tlsData "ca.crt" }}{{ $previous = index $tlsData "ca.crt" | b64dec }}{{ end -}}
{{- end -}}
{{- $svc := printf "%s.%s.svc" $fullname .Release.Namespace -}}
{{- $dns := list $svc (printf "%s.cluster.local" $svc) -}}
{{- $ips := list -}}
{{- with .Values.webhook.url -}}
{{- $host := regexReplaceAll ":[0-9]*$" (urlParse .).host "" | trimPrefix "[" | trimSuffix "]" -}}
{{- if or (regexMatch "^[0-9.]+$" $host) (contains ":" $host) }}{{ $ips = append $ips $host }}{{ else if $host }}{{ $dns = append $dns (lower $host) }}{{ end -}}
{{- end -}}
{{- $names := concat $dns $ips | join "," -}}
{{- $caSha := sha256sum $ca.Cert -}}
{{- $leaf := dict -}}
{{- if and (index $tlsData "tls.crt") (index $tlsData "tls.key") (eq (dig "metadata" "annotations" "driftguard.io/reissue" "" $tlsSecret) $reissue) (eq (dig "metadata" "annotations" "driftguard.io/names" "" $tlsSecret) $names) (eq (dig "metadata" "annotations" "driftguard.io/ca-sha256" "" $tlsSecret) $caSha) -}}
{{- $leaf = dict "Cert" (index $tlsData "tls.crt" | b64dec) "Key" (index $tlsData "tls.key" | b64dec) -}}
{{- else -}}
{{- $leaf = genSignedCert $svc $ips $dns 3650 $ca -}}
{{- end -}}
{{- $bundle := $ca.Cert -}}
{{- if $previous }}{{ $bundle = printf "%s\n%s\n" (trim $ca.Cert) (trim $previous) }}{{ end -}}
{{- $_ := set .Values "_generated" (dict "cert" ($leaf.Cert | b64enc) "key" ($leaf.Key | b64enc) "ca" ($bundle | b64enc) "caCert" ($ca.Cert | b64enc) "caKey" ($ca.Key | b64enc) "rotation" $rotation "reissue" $reissue "names" $names "caSha" $caSha) -}}
{{- end -}}
{{- toYaml .Values._generated -}}
{{- end -}}

{{/* "true" when `lookup` reaches a cluster: not under `helm template`, `helm
     lint` or Argo CD, where it returns nothing. Every cluster has kube-system,
     and whoever may install webhook configurations may read Namespaces. */}}
{{- define "driftguard.lookupWorks" -}}
{{- if lookup "v1" "Namespace" "" "kube-system" }}true{{ end -}}
{{- end -}}

{{/* The break-glass expiry sweeper runs (and gets its RBAC) only when asked
     for and when the policy lets someone break glass at all. */}}
{{- define "driftguard.sweeps" -}}
{{- if and .Values.breakGlass.restoreAtExpiry (or .Values.policy.breakGlass.allowedGroups .Values.policy.breakGlass.allowedUsers) -}}true{{- end -}}
{{- end -}}

{{/* The volume holding the client CA as ca.crt; contradictory values fail the install. */}}
{{- define "driftguard.clientCaVolume" -}}
{{- $ca := .Values.clientAuth.ca -}}
{{- $sources := 0 -}}
{{- range (list $ca.secretName $ca.configMapName $ca.pem) }}{{ if . }}{{ $sources = add1 $sources }}{{ end }}{{ end -}}
{{- if ne (int $sources) 1 -}}
{{- fail "clientAuth.ca: set exactly one of secretName, configMapName or pem" -}}
{{- end -}}
{{- if not .Values.clientAuth.allowedNames -}}
{{- fail "clientAuth.allowedNames: name the apiserver's client certificate (its CN or a DNS/URI SAN); a CA alone lets in every certificate it signed" -}}
{{- end -}}
- name: client-ca
{{- if $ca.secretName }}
  secret: {secretName: {{ $ca.secretName }}, items: [{key: {{ $ca.key }}, path: ca.crt}]}
{{- else if $ca.configMapName }}
  configMap: {name: {{ $ca.configMapName }}, items: [{key: {{ $ca.key }}, path: ca.crt}]}
{{- else }}
  configMap: {name: {{ include "driftguard.fullname" . }}-client-ca}
{{- end }}
{{- end }}

{{/* The NetworkPolicy is rendered when asked for, and by default whenever
     webhookFrom says where the apiserver calls from: the chart cannot know
     that address itself (kind, k3d and managed control planes differ). */}}
{{- define "driftguard.networkPolicy" -}}
{{- $on := .Values.networkPolicy.enabled -}}
{{- if kindIs "invalid" $on -}}{{- $on = not (empty .Values.networkPolicy.webhookFrom) -}}{{- end -}}
{{- if $on -}}true{{- end -}}
{{- end -}}

{{/*
`driftguard serve`'s arguments: the Deployment's, and the pre-install and
pre-upgrade hook's (templates/config-check.yaml), which adds --check-config,
so that a policy or flags serve would refuse fail the release before
anything changes.
*/}}
{{- define "driftguard.serveArgs" -}}
- serve
- --listen=0.0.0.0:{{ .Values.server.port }}
- --probe-listen=0.0.0.0:{{ .Values.server.probePort }}
- --tls-cert=/tls/tls.crt
- --tls-key=/tls/tls.key
- --policy=/policy/policy.yaml
- --log-format={{ .Values.server.logFormat }}
- --on-error={{ .Values.server.onError }}
- --decision-timeout={{ .Values.server.decisionTimeout }}
- --memory-budget-bytes={{ int64 .Values.server.memoryBudgetBytes }}
- --shutdown-delay={{ .Values.server.shutdownDelay }}
- --shutdown-timeout={{ .Values.server.shutdownTimeout }}
- --max-connections={{ .Values.server.maxConnections }}
- --argocd-namespace={{ .Values.watch.argocdNamespace }}
- --sources-wait={{ .Values.watch.sourcesWait }}
{{- if .Values.watch.argocd }}
- --watch-argocd
{{- end }}
{{- if and (not .Values.breakGlass.restoreAtExpiry) (or .Values.policy.breakGlass.allowedGroups .Values.policy.breakGlass.allowedUsers) }}
{{- fail "breakGlass.restoreAtExpiry: false with policy.breakGlass allowing someone: driftguard refuses to start with break-glass allowed and no expiry sweeper (nothing would end a break-glass or lift its GitOps pause). Keep restoreAtExpiry: true, or allow no one" }}
{{- end }}
- --break-glass-sweep-interval={{ if include "driftguard.sweeps" . }}{{ .Values.breakGlass.sweepInterval }}{{ else }}0{{ end }}
{{- if include "driftguard.sweeps" . }}
# One replica sweeps: the holder of this Lease (templates/rbac.yaml).
- --break-glass-sweeper-lease={{ .Release.Namespace }}/{{ include "driftguard.fullname" . }}-sweeper
{{- end }}
{{- if .Values.watch.flux }}
- --watch-flux
{{- with .Values.watch.fluxDefaultServiceAccount }}
- --flux-default-service-account={{ . }}
{{- end }}
{{- else if .Values.watch.fluxDefaultServiceAccount }}
{{- fail "watch.fluxDefaultServiceAccount needs watch.flux" }}
{{- end }}
{{- with .Values.watch.hub }}
{{- if and (or .argocdKubeconfigSecret .fluxKubeconfigSecret) (not .clusterNames) }}
{{- fail "watch.hub: a hub kubeconfig needs watch.hub.clusterNames, what the hub calls this cluster" }}
{{- end }}
{{- if and .argocdKubeconfigSecret (not $.Values.watch.argocd) }}
{{- fail "watch.hub.argocdKubeconfigSecret needs watch.argocd" }}
{{- end }}
{{- if and .fluxKubeconfigSecret (not $.Values.watch.flux) }}
{{- fail "watch.hub.fluxKubeconfigSecret needs watch.flux" }}
{{- end }}
{{- if .argocdKubeconfigSecret }}
- --argocd-kubeconfig=/hub/argocd/kubeconfig
{{- end }}
{{- if and .argocdApplicationSelector (not .argocdKubeconfigSecret) }}
{{- fail "watch.hub.argocdApplicationSelector needs watch.hub.argocdKubeconfigSecret" }}
{{- end }}
{{- with .argocdApplicationSelector }}
- --argocd-application-selector={{ . }}
{{- end }}
{{- if and .localArgocdNamespace (not .argocdKubeconfigSecret) }}
{{- fail "watch.hub.localArgocdNamespace needs watch.hub.argocdKubeconfigSecret (without a hub, watch.argocdNamespace is this cluster's Argo CD)" }}
{{- end }}
{{- if .localArgocdNamespace }}
- --local-argocd-namespace={{ .localArgocdNamespace }}
{{- end }}
{{- if .fluxKubeconfigSecret }}
- --flux-kubeconfig=/hub/flux/kubeconfig
{{- end }}
{{- if and .localFlux (not .fluxKubeconfigSecret) }}
{{- fail "watch.hub.localFlux needs watch.hub.fluxKubeconfigSecret (without a hub, watch.flux is this cluster's Flux)" }}
{{- end }}
{{- if .localFlux }}
- --local-flux
{{- end }}
{{- range .clusterNames }}
- --cluster-name={{ . }}
{{- end }}
{{- end }}
{{- if .Values.guard.enabled }}
- --guard-namespace={{ .Release.Namespace }}
- --guard-configmap={{ include "driftguard.fullname" . }}-policy
- --guard-deployment={{ include "driftguard.fullname" . }}
- --guard-webhook-configuration={{ include "driftguard.fullname" . }}
{{- end }}
{{- if .Values.clientAuth.enabled }}
- --client-ca=/client-ca/ca.crt
{{- range .Values.clientAuth.allowedNames }}
- --client-name={{ . }}
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
