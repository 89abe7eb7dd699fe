{{/*
Names. The release's objects are "<fullname>-<component>"; fullname is the release name, or
"<release>-berth" when the release name does not already say berth.
*/}}
{{- define "berth.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "berth.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" -}}
{{- end -}}

{{/* The object name of one component: (dict "root" $ "component" "decision"). */}}
{{- define "berth.componentName" -}}
{{- printf "%s-%s" (include "berth.fullname" .root) .component -}}
{{- end -}}

{{- define "berth.selectorLabels" -}}
app.kubernetes.io/name: berth
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "berth.labels" -}}
{{ include "berth.selectorLabels" . }}
app.kubernetes.io/part-of: berth
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ include "berth.chart" .root }}
{{- end -}}

{{- define "berth.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "berth.metricsAnnotations" -}}
{{- if .Values.metrics.annotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.metrics.port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{/*
Kafka settings as BERTH_* variables (berth/settings.py). Credentials come from Secrets, never
from values, so they stay out of the release's stored manifest.
*/}}
{{- define "berth.kafkaEnv" -}}
{{- $kafka := .Values.kafka -}}
- name: BERTH_KAFKA_BOOTSTRAP
  value: {{ required "kafka.bootstrap: give the Kafka bootstrap servers, host:port[,host:port]" $kafka.bootstrap | quote }}
- name: BERTH_KAFKA__SECURITY_PROTOCOL
  value: {{ $kafka.securityProtocol | quote }}
- name: BERTH_KAFKA__REPLICATION_FACTOR
  value: {{ $kafka.replicationFactor | quote }}
{{- if hasPrefix "SASL_" $kafka.securityProtocol }}
{{- if not $kafka.sasl.existingSecret }}
{{- fail (printf "kafka.securityProtocol=%s needs kafka.sasl.existingSecret: a Secret with the keys %s and %s" $kafka.securityProtocol $kafka.sasl.usernameKey $kafka.sasl.passwordKey) }}
{{- end }}
- name: BERTH_KAFKA__SASL_MECHANISM
  value: {{ $kafka.sasl.mechanism | quote }}
- name: BERTH_KAFKA__SASL_USERNAME
  valueFrom:
    secretKeyRef: {name: {{ $kafka.sasl.existingSecret | quote }}, key: {{ $kafka.sasl.usernameKey | quote }}}
- name: BERTH_KAFKA__SASL_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ $kafka.sasl.existingSecret | quote }}, key: {{ $kafka.sasl.passwordKey | quote }}}
{{- end }}
{{- if and (hasSuffix "SSL" $kafka.securityProtocol) $kafka.tls.existingSecret }}
- name: BERTH_KAFKA__SSL_CAFILE
  value: /etc/berth/kafka-tls/{{ $kafka.tls.caKey }}
{{- if $kafka.tls.certKey }}
- name: BERTH_KAFKA__SSL_CERTFILE
  value: /etc/berth/kafka-tls/{{ $kafka.tls.certKey }}
- name: BERTH_KAFKA__SSL_KEYFILE
  value: /etc/berth/kafka-tls/{{ $kafka.tls.keyKey | required "kafka.tls.keyKey: the client certificate needs its key" }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "berth.databaseEnv" -}}
- name: BERTH_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "database.existingSecret: name a Secret holding the audit store's URL" .Values.database.existingSecret | quote }}
      key: {{ .Values.database.urlKey | quote }}
{{- with .Values.database.sslmode }}
- name: BERTH_DATABASE__SSLMODE
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "berth.commonEnv" -}}
- name: BERTH_LOG_LEVEL
  value: {{ .Values.log.level | quote }}
- name: BERTH_LOG_FORMAT
  value: {{ .Values.log.format | quote }}
# The root filesystem is read-only: HOME and faust's table store live on emptyDir volumes.
- name: HOME
  value: /tmp
- name: XDG_STATE_HOME
  value: /var/lib/berth
{{- end -}}

{{- define "berth.podSecurityContext" -}}
runAsNonRoot: true
# The image's `berth` user (Dockerfile: useradd --uid 10001).
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "berth.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{- define "berth.kafkaTlsVolume" -}}
{{- if and (hasSuffix "SSL" .Values.kafka.securityProtocol) .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.tls.existingSecret | quote }}
{{- end }}
{{- end -}}

{{- define "berth.kafkaTlsMount" -}}
{{- if and (hasSuffix "SSL" .Values.kafka.securityProtocol) .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  mountPath: /etc/berth/kafka-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "berth.scheduling" -}}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The schedulerName of every profile in the scheduler configuration (a profile without one is
`berth`, as in berth/core/config.py): ingest publishes the pending pods of exactly these.
*/}}
{{- define "berth.schedulerNames" -}}
{{- $names := list -}}
{{- range ((.Values.scheduler.config).profiles | default list) -}}
{{- $names = append $names (.schedulerName | default "berth") -}}
{{- end -}}
{{- toYaml ($names | default (list "berth")) -}}
{{- end -}}

{{/*
The services in one table: values key, component name (as in `berth <component> run`), whether it
talks to the Kubernetes API (only then is a token mounted), whether it reads Postgres, and the
arguments after `run`. Least privilege is decided here, not in values: a values typo cannot give
the decision service API access.
*/}}
{{- define "berth.components" -}}
ingest: {component: ingest, kubernetes: true, database: false, config: false, lease: true, args: [--lease-name, {{ .Values.ingest.leaseName | quote }}{{ range (include "berth.schedulerNames" . | fromYamlArray) }}, --scheduler-name, {{ . | quote }}{{ end }}]}
inventory: {component: inventory, kubernetes: false, database: false, config: false, args: []}
tokenLag: {component: token-lag, kubernetes: false, database: false, config: true, args: [--pools, /etc/berth/config/pools.yaml]}
decision: {component: decision, kubernetes: false, database: false, config: true, args: [--config, /etc/berth/config/scheduler.yaml, --pools, /etc/berth/config/pools.yaml]}
binder: {component: binder, kubernetes: true, database: false, config: false, args: [--backend, kube, --qps, {{ .Values.binder.qps | quote }}, --burst, {{ .Values.binder.burst | quote }}]}
audit: {component: audit, kubernetes: false, database: true, config: false, args: []}
{{- end -}}
