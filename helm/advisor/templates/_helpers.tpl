{{/* Names, labels and the settings file shared by the templates. */}}

{{- define "advisor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "advisor.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "advisor.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "advisor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "advisor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "advisor.labels" -}}
helm.sh/chart: {{ include "advisor.chart" . }}
{{ include "advisor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: controller
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "advisor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "advisor.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The controller image. No image is published, so an unset repository (or the name this chart
once shipped as a placeholder) fails the render with what to do instead.
*/}}
{{- define "advisor.image" -}}
{{- $repo := .Values.image.repository | default "" }}
{{- if or (not $repo) (eq $repo "ghcr.io/training-advisor/advisor") (contains "REPLACE" $repo) }}
{{- fail (printf "image.repository is %q, a placeholder: no advisor image is published. Build the repository's Dockerfile and set image.repository (and image.tag), e.g. for kind: docker build -t advisor:%s . && kind load docker-image advisor:%s, then helm install ... --set image.repository=advisor (docs/deploy.md, step 1)" $repo .Chart.AppVersion .Chart.AppVersion) }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "advisor.ingestURL" -}}
{{- default (printf "%s://%s.%s.svc:%d" (ternary "https" "http" .Values.tls.enabled) (include "advisor.fullname" .) .Release.Namespace (int .Values.service.port)) .Values.config.ingest_url }}
{{- end }}

{{- define "advisor.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "advisor.fullname" .)) .Values.tls.secretName }}
{{- end }}

{{/* A probe from values, over HTTPS when tls.enabled. */}}
{{- define "advisor.probe" -}}
{{- $probe := deepCopy .probe }}
{{- if and .root.Values.tls.enabled $probe.httpGet }}
{{- $_ := set $probe.httpGet "scheme" "HTTPS" }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/*
The controller's settings file: .Values.config, minus optional settings left empty (the
controller's default applies), plus the chart-managed ones. With the job backend, the prediction
Jobs run the controller's image, pulled with its imagePullSecrets, unless config says otherwise.
*/}}
{{- define "advisor.settings" -}}
{{- if and .Values.tls.enabled (eq .Values.config.prediction_backend "job") }}
{{- fail "tls.enabled with config.prediction_backend job is not supported: the prediction pods the controller creates do not trust the ingest certificate. Use the process backend with TLS" }}
{{- end }}
{{- if gt (int .Values.config.min_workers) (int .Values.config.max_workers) }}
{{- fail (printf "config.min_workers (%v) exceeds config.max_workers (%v)" .Values.config.min_workers .Values.config.max_workers) }}
{{- end }}
{{- $cfg := deepCopy .Values.config }}
{{- range $key := list "bandwidth" "queue" "budget_per_hour" "prediction_job_image" }}
{{- if not (get $cfg $key) }}
{{- $_ := unset $cfg $key }}
{{- end }}
{{- end }}
{{- if eq .Values.config.prediction_backend "job" }}
{{- if not .Values.config.prediction_job_image }}
{{- $_ := set $cfg "prediction_job_image" (include "advisor.image" .) }}
{{- end }}
{{- if not .Values.config.prediction_job_image_pull_secrets }}
{{- $names := list }}
{{- range .Values.imagePullSecrets }}
{{- $names = append $names .name }}
{{- end }}
{{- $_ := set $cfg "prediction_job_image_pull_secrets" $names }}
{{- end }}
{{- end }}
{{- $_ := set $cfg "ingest_url" (include "advisor.ingestURL" .) }}
{{- $_ := set $cfg "http_port" (int .Values.containerPort) }}
{{- $_ := set $cfg "metrics_port" (int .Values.metricsPort) }}
{{- if eq (int .Values.metricsPort) (int .Values.containerPort) }}
{{- fail "metricsPort must differ from containerPort: the NetworkPolicy opens ingest and metrics to different clients" }}
{{- end }}
{{- $_ := set $cfg "store_path" (printf "%s/advisor.db" (trimSuffix "/" .Values.persistence.mountPath)) }}
{{- $_ := set $cfg "ingest_key_file" "/etc/advisor-ingest-key/key" }}
{{- toYaml $cfg }}
{{- end }}

{{/* "true" when an entry of rbac-calls.yaml applies with these values, else "". */}}
{{- define "advisor.callApplies" -}}
{{- $when := .call.when | default "always" }}
{{- if eq $when "always" }}true
{{- else if eq $when "leader_election" }}{{ if .root.Values.config.leader_election }}true{{ end }}
{{- else if eq $when "job_backend" }}{{ if eq .root.Values.config.prediction_backend "job" }}true{{ end }}
{{- else if eq $when "cluster_mode" }}{{ if .root.Values.config.cluster_mode }}true{{ end }}
{{- else if eq $when "node_speeds" }}{{ if .root.Values.config.node_speeds }}true{{ end }}
{{- else }}{{ fail (printf "rbac-calls.yaml: unknown condition %q" $when) }}
{{- end }}
{{- end }}

{{/* The RBAC rules for the entries of rbac-calls.yaml with this scope that apply. */}}
{{- define "advisor.rules" -}}
{{- $root := .root }}
{{- $scope := .scope }}
{{- range $call := (fromYaml ($root.Files.Get "rbac-calls.yaml")).calls }}
{{- if and (eq $call.scope $scope) (include "advisor.callApplies" (dict "call" $call "root" $root)) }}
- apiGroups: [{{ $call.group | quote }}]
  resources: [{{ if $call.subresource }}{{ printf "%s/%s" $call.resource $call.subresource | quote }}{{ else }}{{ $call.resource | quote }}{{ end }}]
  verbs: {{ toJson $call.verbs }}
{{- end }}
{{- end }}
{{- end }}
