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

{{- define "gpuhealth.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
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

{{/*
The remediator's effective policy: what the chart derives (namespaces and names of objects it
creates, the Alertmanager URL), overridden by .Values.remediator.policy. RBAC reads it too, so the
Roles follow the namespaces the policy names.
*/}}
{{- define "gpuhealth.policy" -}}
{{- $derived := dict
  "jobs" (dict "namespace" .Release.Namespace "service_account" (include "gpuhealth.nodeAction.fullname" .))
  "leader" (dict "namespace" .Release.Namespace "name" (include "gpuhealth.remediator.fullname" .))
  "alertmanager" (dict "url" .Values.remediator.alertmanagerURL) -}}
{{- toYaml (mustMergeOverwrite $derived (deepCopy .Values.remediator.policy)) -}}
{{- end -}}

{{/* The node label that names a node's pool (the policy's pools.label), as a Prometheus meta label. */}}
{{- define "gpuhealth.poolMetaLabel" -}}
{{- $policy := include "gpuhealth.policy" . | fromYaml -}}
{{- $label := dig "pools" "label" "karpenter.sh/nodepool" $policy -}}
{{- printf "__meta_kubernetes_node_label_%s" (regexReplaceAll "[^a-zA-Z0-9_]" $label "_") -}}
{{- end -}}
