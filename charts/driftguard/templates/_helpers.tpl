{{- define "driftguard.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{ else }}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{ end }}
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
{{- $terms := list -}}
{{- if $exact }}{{ $terms = append $terms (printf "request.userInfo.username in [%s]" (include "driftguard.celList" $exact)) }}{{ end -}}
{{- range $p := $prefixes }}{{ $terms = append $terms (printf "request.userInfo.username.startsWith(%s)" (include "driftguard.celString" $p)) }}{{ end -}}
{{- if $gexact }}{{ $terms = append $terms (printf "(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in [%s]))" (include "driftguard.celList" $gexact)) }}{{ end -}}
{{- range $p := $gprefixes }}{{ $terms = append $terms (printf "(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g.startsWith(%s)))" (include "driftguard.celString" $p)) }}{{ end -}}
{{- if $terms }}!({{ join " || " $terms }}){{ end -}}
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

{{/* CEL: the object ("oldObject" or "object") carries tracking metadata of an enabled detector; empty with every detector off. */}}
{{- define "driftguard.carries" -}}
{{- $o := .object -}}
{{- $gitops := .root.Values.policy.gitops | default dict -}}
{{- $argo := $gitops.argocd | default dict -}}
{{- $flux := $gitops.flux | default dict -}}
{{- $annotations := list -}}{{- $labels := list -}}
{{- $argoOn := true -}}{{- if hasKey $argo "enabled" }}{{ $argoOn = $argo.enabled }}{{ end -}}
{{- if $argoOn -}}
{{- $annotations = append $annotations ($argo.trackingAnnotation | default "argocd.argoproj.io/tracking-id") -}}
{{- $instance := "app.kubernetes.io/instance" -}}{{- if hasKey $argo "instanceLabel" }}{{ $instance = $argo.instanceLabel }}{{ end -}}
{{- if $instance }}{{ $labels = append $labels $instance }}{{ end -}}
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
A CA and serving certificate generated by Helm, base64-encoded. On upgrade the
existing Secret is read back (`lookup`) so the CA does not change. `helm template`
and Argo CD cannot look up, so they generate a new pair on every render: use
cert-manager or provided PEMs there. Memoized so that every template of one
render sees the same pair.
*/}}
{{- define "driftguard.generatedPair" -}}
{{- $fullname := include "driftguard.fullname" . -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (printf "%s-tls" $fullname) -}}
{{- if and $existing $existing.data (index $existing.data "ca.crt") -}}
cert: {{ index $existing.data "tls.crt" }}
key: {{ index $existing.data "tls.key" }}
ca: {{ index $existing.data "ca.crt" }}
{{- else -}}
{{- if not (hasKey .Values "_generated") -}}
{{- $ca := genCA "driftguard-ca" 3650 -}}
{{- $svc := printf "%s.%s.svc" $fullname .Release.Namespace -}}
{{- $cert := genSignedCert $svc nil (list $svc (printf "%s.cluster.local" $svc)) 3650 $ca -}}
{{- $_ := set .Values "_generated" (dict "cert" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) "ca" ($ca.Cert | b64enc)) -}}
{{- end -}}
{{- toYaml .Values._generated -}}
{{- end -}}
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
