{{/* Names. */}}
{{- define "gpuhealth.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuhealth.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpuhealth.exporter.fullname" -}}
{{- printf "%s-exporter" (include "gpuhealth.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuhealth.remediator.fullname" -}}
{{- printf "%s-remediator" (include "gpuhealth.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The ServiceAccount of the privileged reset/reboot Jobs: no RBAC, no token. */}}
{{- define "gpuhealth.nodeAction.fullname" -}}
{{- printf "%s-node-action" (include "gpuhealth.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuhealth.tokenSecret" -}}
{{- .Values.remediator.webhookToken.existingSecret | default (include "gpuhealth.remediator.fullname" .) -}}
{{- end -}}

{{/*
The one image of both programs: repository@digest when image.digest is set (the bytes are pinned: a node with
another image cached under the same tag cannot run it), else repository:tag, the tag defaulting to the chart's
appVersion, so each release runs its own image (docs/install.md, "Upgrading").
*/}}
{{- define "gpuhealth.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* Labels: commonLabels go with a component's selectorLabels (which carry the instance). */}}
{{- define "gpuhealth.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/part-of: gpuhealth
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gpuhealth.labels" -}}
{{ include "gpuhealth.commonLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpuhealth.exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuhealth.name" . }}-exporter
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: exporter
{{- end -}}

{{- define "gpuhealth.remediator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuhealth.name" . }}-remediator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: remediator
{{- end -}}

{{/* The `helm test` pod's labels (templates/tests/): the remediator's NetworkPolicy admits exactly these. */}}
{{- define "gpuhealth.helmTest.labels" -}}
{{ include "gpuhealth.commonLabels" . }}
app.kubernetes.io/name: {{ include "gpuhealth.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: helm-test
{{- end -}}

{{/*
The remediator's effective policy: what the chart derives (namespaces and names of objects it
creates, the Alertmanager URL), overridden by .Values.remediator.policy. RBAC reads it too, so the
Roles follow the namespaces the policy names.
*/}}
{{- define "gpuhealth.policy" -}}
{{- $derived := dict
  "jobs" (dict "namespace" .Release.Namespace "service_account" (include "gpuhealth.nodeAction.fullname" .))
  "leader" (dict "namespace" .Release.Namespace "name" (include "gpuhealth.remediator.fullname" .))
  "alertmanager" (dict "url" .Values.remediator.alertmanagerURL)
  "diagnose" (dict "judge_image" (include "gpuhealth.image" .) "image" .Values.remediator.jobs.collectImage) -}}
{{- if not (include "gpuhealth.draGranted" .) }}
{{- if eq (toString (dig "dra" "enabled" "" .Values.remediator.policy)) "true" }}
{{- fail (printf "remediator.policy.dra.enabled is true but remediator.rbac.dra (%v) grants no resource.k8s.io objects: set remediator.rbac.dra to true, or leave dra.enabled unset" .Values.remediator.rbac.dra) }}
{{- end }}
{{- $_ := set $derived "dra" (dict "enabled" false) }}
{{- end }}
{{- with .Values.remediator.alertmanager }}
{{- if .bearerTokenSecret.name }}
{{- $_ := set $derived.alertmanager "bearer_token_file" (printf "/var/run/secrets/alertmanager-token/%s" .bearerTokenSecret.key) }}
{{- end }}
{{- if .caSecret.name }}
{{- $_ := set $derived.alertmanager "ca_file" (printf "/var/run/secrets/alertmanager-ca/%s" .caSecret.key) }}
{{- end }}
{{- $set := .statefulSet | default dict }}
{{- if and $set.name (gt (int ($set.replicas | default 0)) 0) (ne $.Values.remediator.alertmanagerURL "none") }}
{{- $url := urlParse $.Values.remediator.alertmanagerURL }}
{{- $members := list }}
{{- range $i := until (int $set.replicas) }}
{{- $members = append $members (printf "%s://%s-%d.%s%s" $url.scheme $set.name $i $url.host (trimSuffix "/" $url.path)) }}
{{- end }}
{{- $_ := set $derived.alertmanager "url" $members }}
{{- end }}
{{- end }}
{{- with .Values.remediator.jobs }}
{{- $_ := set $derived.jobs "image" .image }}
{{- with .runtimeClassName }}{{ $_ := set $derived.jobs "runtime_class_name" . }}{{ end }}
{{- with .priorityClassName }}{{ $_ := set $derived.jobs "priority_class_name" . }}{{ end }}
{{- with .resources }}{{ $_ := set $derived.jobs "resources" (deepCopy .) }}{{ end }}
{{- if .imagePullSecrets }}
{{- $names := list }}
{{- range .imagePullSecrets }}{{ $names = append $names .name }}{{ end }}
{{- $_ := set $derived.jobs "image_pull_secrets" $names }}
{{- end }}
{{- end }}
{{- toYaml (mustMergeOverwrite $derived (deepCopy .Values.remediator.policy)) -}}
{{- end -}}

{{/*
"true" when the chart grants GPU scope's resource.k8s.io objects (remediator.rbac.dra: true, or auto where the API
server serves DeviceTaintRule in any version as Helm sees the cluster), else "".
*/}}
{{- define "gpuhealth.draGranted" -}}
{{- $dra := toString .Values.remediator.rbac.dra -}}
{{- if eq $dra "true" -}}
true
{{- else if eq $dra "auto" -}}
{{- range $version := list "v1" "v1beta2" "v1alpha3" -}}
{{- if $.Capabilities.APIVersions.Has (printf "resource.k8s.io/%s/DeviceTaintRule" $version) -}}true{{- break -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The node label that names a node's pool (the policy's pools.label), as a Prometheus meta label. */}}
{{- define "gpuhealth.poolMetaLabel" -}}
{{- $policy := include "gpuhealth.policy" . | fromYaml -}}
{{- $label := dig "pools" "label" "karpenter.sh/nodepool" $policy -}}
{{- printf "__meta_kubernetes_node_label_%s" (regexReplaceAll "[^a-zA-Z0-9_]" $label "_") -}}
{{- end -}}

{{/*
The exporter's kernel log: "hostPath" (the host's /dev/kmsg mounted: the default), "runtime" (something
else gives the container /dev/kmsg: a device plugin or CDI) or "off" (probes.kmsg.enabled: false).
*/}}
{{- define "gpuhealth.exporter.kmsg" -}}
{{- if not (dig "probes" "kmsg" "enabled" true .Values.exporter.config) -}}
off
{{- else if .Values.exporter.kmsg.hostPath -}}
hostPath
{{- else -}}
runtime
{{- end -}}
{{- end -}}

{{/*
The exporter container's securityContext: exporter.securityContext as given, else the narrowest that the
enabled probes need (docs/install.md, "What each probe needs"). Only the kernel log read from a hostPath
/dev/kmsg needs privileged: the runtime's device cgroup lets an unprivileged container open no host
device, whatever its capabilities. NVML, DCGM, EFA and diag need no capability. The kubelet's
pod-resources socket (exporter.podResources) needs uid 0, and no capability.
*/}}
{{- define "gpuhealth.exporter.securityContext" -}}
{{- $kmsg := include "gpuhealth.exporter.kmsg" . -}}
{{- if .Values.exporter.securityContext -}}
{{- toYaml .Values.exporter.securityContext -}}
{{- else if eq $kmsg "hostPath" -}}
privileged: true
runAsUser: 0
readOnlyRootFilesystem: true
{{- else -}}
privileged: false
allowPrivilegeEscalation: false
{{- if or (eq $kmsg "runtime") .Values.exporter.podResources.enabled }}
runAsUser: 0
{{- else }}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
{{- end }}
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
  {{- if eq $kmsg "runtime" }}
  add: [SYSLOG]
  {{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- end -}}

{{/*
Labels of a Prometheus Operator object (PodMonitor, ServiceMonitor, PrometheusRule, AlertmanagerConfig): the
chart's, then release: <monitoring.release> (kube-prometheus-stack's selectors), then the object's own labels,
which win. Called with (dict "root" $ "labels" <the object's labels value>).
*/}}
{{- define "gpuhealth.monitoringLabels" -}}
{{- $labels := dict -}}
{{- with .root.Values.monitoring.release }}
{{- $_ := set $labels "release" . }}
{{- end }}
{{- $labels = mustMergeOverwrite $labels (deepCopy (.labels | default dict)) -}}
{{ include "gpuhealth.labels" .root }}
{{- with $labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The remediator's nodeAffinity away from GPU nodes (remediator.offGPUNodes): nodes without the exporter's GPU labels
(nvidia.com/gpu.present=true, karpenter.k8s.aws/instance-gpu-count > 0), preferred or required; nothing for none.
*/}}
{{- define "gpuhealth.remediator.offGPUNodes" -}}
{{- $terms := list
  (list (dict "key" "nvidia.com/gpu.present" "operator" "NotIn" "values" (list "true"))
        (dict "key" "karpenter.k8s.aws/instance-gpu-count" "operator" "DoesNotExist"))
  (list (dict "key" "nvidia.com/gpu.present" "operator" "NotIn" "values" (list "true"))
        (dict "key" "karpenter.k8s.aws/instance-gpu-count" "operator" "Lt" "values" (list "1"))) -}}
{{- if eq .Values.remediator.offGPUNodes "required" }}
# Never on a GPU node: the nodes gpuhealth acts on.
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      {{- range $terms }}
      - matchExpressions: {{ toJson . }}
      {{- end }}
{{- else if eq .Values.remediator.offGPUNodes "preferred" }}
# Off GPU nodes where others can take it: the nodes gpuhealth acts on.
nodeAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    {{- range $terms }}
    - weight: 100
      preference:
        matchExpressions: {{ toJson . }}
    {{- end }}
{{- end }}
{{- end -}}
