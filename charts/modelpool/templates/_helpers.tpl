{{/*
Labels every object of the chart carries. The kustomize manifests carry the same
app.kubernetes.io/{name,part-of,component} labels; Helm adds who manages the object and which
release it belongs to.
*/}}
{{- define "modelpool.labels" -}}
app.kubernetes.io/part-of: modelpool
{{ include "modelpool.helmLabels" . }}
{{- end }}

{{/* Only what Helm adds: the generated templates already carry the manifests' own labels. */}}
{{- define "modelpool.helmLabels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The operator's selector labels: fixed, because the operator's RBAC check, the network
policy and the monitors select its pods by them. */}}
{{- define "modelpool.operatorSelector" -}}
app.kubernetes.io/name: modelpool-operator
{{- end }}

{{- define "modelpool.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end }}
