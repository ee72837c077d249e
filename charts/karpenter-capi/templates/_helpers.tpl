{{/* The release's full name: the release name, prefixed by the chart name unless it has it. */}}
{{- define "karpenter-capi.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "karpenter-capi.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "karpenter-capi.labels" -}}
{{ include "karpenter-capi.selectorLabels" . }}
app.kubernetes.io/part-of: {{ .Chart.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "karpenter-capi.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "karpenter-capi.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "karpenter-capi.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The port of a host:port address (settings.metricsAddr, settings.healthAddr). */}}
{{- define "karpenter-capi.port" -}}
{{- splitList ":" . | last | int -}}
{{- end -}}

{{/* Whether the operator runs in this cluster (modes single, workload and hub). */}}
{{- define "karpenter-capi.runsOperator" -}}
{{- if ne .Values.mode "management" }}true{{ end -}}
{{- end -}}

{{/* Whether this cluster holds the Cluster API objects (modes single, management and hub). */}}
{{- define "karpenter-capi.holdsClusterAPI" -}}
{{- if ne .Values.mode "workload" }}true{{ end -}}
{{- end -}}

{{- define "karpenter-capi.validate" -}}
{{- if not (has .Values.mode (list "single" "workload" "management" "hub")) -}}
{{- fail (printf "mode must be single, workload, management or hub, not %q" .Values.mode) -}}
{{- end -}}
{{- if and .Values.settings.disableLeaderElection (gt (int .Values.replicas) 1) -}}
{{- fail "settings.disableLeaderElection needs replicas: 1" -}}
{{- end -}}
{{- if and (not (kindIs "invalid" .Values.settings.shardIndex)) (gt (int .Values.replicas) 1) -}}
{{- fail (printf "settings.shardIndex (%v) needs replicas: 1, not replicas: %v: the replicas of one Deployment would all get the same index and the other shards' Clusters nobody; install one release per shard index" .Values.settings.shardIndex .Values.replicas) -}}
{{- end -}}
{{- if and (eq .Values.mode "workload") (not .Values.managementCluster.kubeconfigSecret.name) -}}
{{- fail "mode=workload needs managementCluster.kubeconfigSecret.name" -}}
{{- end -}}
{{- end -}}

{{/*
The `karpenter-capi run` arguments: every non-null entry of .Values.settings as
--kebab-case=value (true booleans as the bare flag), plus the chart's defaults for the
management kubeconfig (mode=workload) and the leader-election namespace.
*/}}
{{- define "karpenter-capi.args" -}}
{{- $settings := deepCopy .Values.settings -}}
{{- if and (eq .Values.mode "workload") (not $settings.managementKubeconfig) -}}
{{- $_ := set $settings "managementKubeconfig" (printf "/etc/karpenter-capi/management/%s" .Values.managementCluster.kubeconfigSecret.key) -}}
{{- end -}}
{{- if and (eq .Values.mode "hub") (not $settings.mode) -}}
{{- $_ := set $settings "mode" "hub" -}}
{{- end -}}
{{- if not $settings.leaderElectionNamespace -}}
{{- $_ := set $settings "leaderElectionNamespace" .Release.Namespace -}}
{{- end }}
- run
{{- range $name, $value := $settings }}
{{- if kindIs "bool" $value }}
{{- if $value }}
- --{{ kebabcase $name }}
{{- end }}
{{- else if not (kindIs "invalid" $value) }}
{{- if and (kindIs "float64" $value) (eq $value (floor $value)) }}{{ $value = int64 $value }}{{ end }}
- {{ printf "--%s=%v" (kebabcase $name) $value | quote }}
{{- end }}
{{- end }}
{{- end -}}
