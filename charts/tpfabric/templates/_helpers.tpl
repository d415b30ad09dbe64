{{/* Name of the chart (overridable). */}}
{{- define "tpfabric.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart, unless the release name already holds the chart name. Component
suffixes (at most 10 characters) are appended to it, so it is cut at 52. */}}
{{- define "tpfabric.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tpfabric.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "tpfabric.labels" -}}
helm.sh/chart: {{ include "tpfabric.chart" . }}
{{ include "tpfabric.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tpfabric
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "tpfabric.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tpfabric.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of one component's objects: (dict "ctx" $ "component" "operator"). */}}
{{- define "tpfabric.componentLabels" -}}
{{ include "tpfabric.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "tpfabric.componentSelectorLabels" -}}
{{ include "tpfabric.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* ServiceAccount name of a component: (dict "ctx" $ "component" "operator"). */}}
{{- define "tpfabric.serviceAccountName" -}}
{{- $sa := (index .ctx.Values .component).serviceAccount -}}
{{- if $sa.create }}
{{- default (printf "%s-%s" (include "tpfabric.fullname" .ctx) .component) $sa.name }}
{{- else }}
{{- required (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false" .component .component) $sa.name }}
{{- end }}
{{- end }}

{{- /*
An image reference: (dict "ctx" $ "image" .Values.image "tag" TAG). The registry of
`global.imageRegistry` (a parent chart's, or set here) replaces the repository's own, as Docker
reads one: the first path element when it has a `.` or a `:` or is `localhost`
(`registry.k8s.io/kube-scheduler` -> `mirror.example.com/kube-scheduler`), else it is put in
front (`tpfabric/tpfabric` -> `mirror.example.com/tpfabric/tpfabric`). A `digest` pins the image
(`repo@sha256:...`) and the tag is then left out.
*/ -}}
{{- define "tpfabric.imageRef" -}}
{{- $repository := .image.repository }}
{{- $registry := (.ctx.Values.global | default dict).imageRegistry | default "" }}
{{- if $registry }}
{{- $parts := splitList "/" $repository }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- $repository = join "/" (rest $parts) }}
{{- end }}
{{- $repository = printf "%s/%s" (trimSuffix "/" $registry) $repository }}
{{- end }}
{{- if .image.digest }}
{{- printf "%s@%s" $repository .image.digest }}
{{- else }}
{{- printf "%s:%s" $repository .tag }}
{{- end }}
{{- end }}

{{- define "tpfabric.image" -}}
{{- include "tpfabric.imageRef" (dict "ctx" . "image" .Values.image "tag" (default .Chart.AppVersion .Values.image.tag)) }}
{{- end }}

{{- define "tpfabric.rdmaInitImage" -}}
{{- $image := .Values.operator.rdmaInit.image }}
{{- include "tpfabric.imageRef" (dict "ctx" . "image" $image "tag" (default .Chart.AppVersion $image.tag)) }}
{{- end }}

{{/* kube-scheduler must not be newer than the API server: default to the cluster's version. */}}
{{- define "tpfabric.kubeSchedulerImage" -}}
{{- $image := .Values.scheduler.kubeScheduler.image }}
{{- $tag := $image.tag | default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) }}
{{- if not $image.digest }}
{{- $tag = required "scheduler.kubeScheduler.image.tag: cannot read the cluster's version; set it, e.g. v1.30.4" $tag }}
{{- end }}
{{- include "tpfabric.imageRef" (dict "ctx" . "image" $image "tag" $tag) }}
{{- end }}

{{- /*
The topology levels, one setting for every component: `topology.levels` (`name=label-key` pairs,
top level first; the placer's --levels). The settings it replaced fail with what to set.
*/ -}}
{{- define "tpfabric.levels" -}}
{{- with .Values.scheduler.topologyLevels }}
{{- fail (printf "scheduler.topologyLevels moved to topology.levels (one setting for the placer and the gang webhook): set topology.levels=%q and remove scheduler.topologyLevels" .) }}
{{- end }}
{{- with .Values.gangWebhook.levels }}
{{- $pairs := list }}
{{- range $name, $key := . }}{{ $pairs = append $pairs (printf "%s=%s" $name $key) }}{{ end }}
{{- fail (printf "gangWebhook.levels moved to topology.levels, in the placer's format (name=label-key pairs, top level first, e.g. %q): set topology.levels and remove gangWebhook.levels" (join "," $pairs)) }}
{{- end }}
{{- .Values.topology.levels }}
{{- end }}

{{/* Pod security context meeting the Pod Security "restricted" profile. */}}
{{- define "tpfabric.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "tpfabric.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{/* Scheduling knobs of a pod: (dict "values" .Values.operator). */}}
{{- define "tpfabric.podPlacement" -}}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}

{{- define "tpfabric.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- /*
Placement values (tpfabric.podPlacement's) of a component with several replicas: spread over
nodes when they can be; the component's own `affinity` value replaces the spread.
*/ -}}
{{- define "tpfabric.replicaPlacement" -}}
{{- $values := .values -}}
{{- $selector := include "tpfabric.componentSelectorLabels" .component | fromYaml -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" $selector) -}}
{{- $spread := dict "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) -}}
{{- toYaml (dict "nodeSelector" $values.nodeSelector "tolerations" $values.tolerations "affinity" ($values.affinity | default $spread) "priorityClassName" $values.priorityClassName) -}}
{{- end }}

{{/* Who a ServiceAccount is to the API server: (dict "namespace" NS "name" NAME). */}}
{{- define "tpfabric.serviceAccountUser" -}}
system:serviceaccount:{{ .namespace }}:{{ .name }}
{{- end }}

{{/* Namespace of the fabric agent: its own (fabricAgent.namespace), else the release's. */}}
{{- define "tpfabric.fabricAgentNamespace" -}}
{{- .Values.fabricAgent.namespace | default .Release.Namespace }}
{{- end }}

{{/* ServiceAccount name of the fabric agent. */}}
{{- define "tpfabric.fabricAgentAccount" -}}
{{- $agent := .Values.fabricAgent }}
{{- if $agent.serviceAccount.create }}
{{- default (printf "%s-fabric-agent" (include "tpfabric.fullname" .)) $agent.serviceAccount.name }}
{{- else }}
{{- required "fabricAgent.serviceAccount.name is required when fabricAgent.serviceAccount.create is false" $agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* ServiceAccount name of the gang webhook. */}}
{{- define "tpfabric.gangWebhookAccount" -}}
{{- $hook := .Values.gangWebhook }}
{{- if and (not $hook.serviceAccount.create) (not $hook.serviceAccount.name) }}
{{- fail "gangWebhook.serviceAccount.name is required when gangWebhook.serviceAccount.create is false" }}
{{- end }}
{{- $hook.serviceAccount.name | default (printf "%s-gang-webhook" (include "tpfabric.fullname" .)) }}
{{- end }}

{{- /*
CEL of an admission policy: the keys of a metadata map (labels or annotations) whose value an
UPDATE adds, changes or removes. (dict "field" "labels")
*/ -}}
{{- define "tpfabric.cel.changedKeys" -}}
variables.new{{ .field | title }}.filter(k, !(k in variables.old{{ .field | title }}) || variables.old{{ .field | title }}[k] != variables.new{{ .field | title }}[k]) + variables.old{{ .field | title }}.filter(k, !(k in variables.new{{ .field | title }}))
{{- end }}

{{- /* The variables every metadata rule of a policy reads (UPDATE: object and oldObject). */ -}}
{{- define "tpfabric.cel.metadataVariables" -}}
- name: oldLabels
  expression: "oldObject.metadata.?labels.orValue({})"
- name: newLabels
  expression: "object.metadata.?labels.orValue({})"
- name: oldAnnotations
  expression: "oldObject.metadata.?annotations.orValue({})"
- name: newAnnotations
  expression: "object.metadata.?annotations.orValue({})"
- name: changedLabels
  expression: {{ include "tpfabric.cel.changedKeys" (dict "field" "labels") | quote }}
- name: changedAnnotations
  expression: {{ include "tpfabric.cel.changedKeys" (dict "field" "annotations") | quote }}
{{- end }}

{{/* Annotations of the uninstall cleanup's objects (a post-delete hook, weight .): made just
before the Job, deleted once it succeeded, or before the next one. */}}
{{- define "tpfabric.uninstallHook" -}}
helm.sh/hook: post-delete
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}
