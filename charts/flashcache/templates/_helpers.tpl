{{/* Prefix of every object's name. */}}
{{- define "flashcache.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "flashcache.operator.name" -}}{{ include "flashcache.fullname" . }}-operator{{- end -}}
{{- define "flashcache.agent.name" -}}{{ include "flashcache.fullname" . }}-agent{{- end -}}
{{- define "flashcache.webhook.service" -}}{{ include "flashcache.fullname" . }}-webhook{{- end -}}
{{- define "flashcache.webhook.secret" -}}{{ include "flashcache.fullname" . }}-webhook-certs{{- end -}}
{{- define "flashcache.webhook.configuration" -}}{{ include "flashcache.fullname" . }}-eviction{{- end -}}
{{- define "flashcache.agent.priorityClassName" -}}
{{- .Values.agent.priorityClass.name | default (printf "%s-node-critical" (include "flashcache.fullname" .)) -}}
{{- end -}}

{{- /* image.tag may be a digest (sha256:...), which pins the image: repository@digest. */}}
{{- define "flashcache.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- printf "%s%s%s" .Values.image.repository (ternary "@" ":" (hasPrefix "sha256:" $tag)) $tag -}}
{{- end -}}

{{/* Labels of every object; pass (dict "ctx" $ "component" "operator"). */}}
{{- define "flashcache.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
{{ include "flashcache.selectorLabels" . }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels that select a component's pods; they never change across upgrades. */}}
{{- define "flashcache.selectorLabels" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/*
The rules of a component's generated Role or ClusterRole (files/rbac/<component>.yaml, copied
by `make generate` from what controller-gen makes of the Go code's RBAC markers), so the chart
can never grant other verbs than the code asks for. Pass (dict "ctx" $ "component" "operator" "kind" "Role"),
and "resource" to keep only the rules on that resource.
*/}}
{{- define "flashcache.generatedRules" -}}
{{- $found := false -}}
{{- range (.ctx.Files.Get (printf "files/rbac/%s.yaml" .component) | splitList "\n---\n") -}}
{{- $doc := fromYaml . -}}
{{- if eq (get $doc "kind") $.kind -}}
{{- $found = true -}}
{{- $rules := get $doc "rules" -}}
{{- if $.resource -}}
{{- $kept := list -}}
{{- range $rules -}}
{{- if has $.resource .resources -}}
{{- $kept = append $kept . -}}
{{- end -}}
{{- end -}}
{{- $rules = $kept -}}
{{- end -}}
{{ toYaml $rules }}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "files/rbac/%s.yaml has no %s: run make generate" .component .kind) -}}
{{- end -}}
{{- end -}}

{{/* Whether the generated RBAC of a component has a namespaced Role. */}}
{{- define "flashcache.hasRole" -}}
{{- range (.ctx.Files.Get (printf "files/rbac/%s.yaml" .component) | splitList "\n---\n") -}}
{{- if eq (get (fromYaml .) "kind") "Role" }}true{{ end -}}
{{- end -}}
{{- end -}}
