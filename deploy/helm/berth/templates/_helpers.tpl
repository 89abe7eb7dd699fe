{{/*
Names, as `helm create` makes them: "berth.name" is the chart's name or nameOverride;
"berth.fullname" is fullnameOverride if set, else the release name when it already contains
berth.name, else "<release>-<name>"; both at most 63 characters, without a trailing "-".
*/}}
{{- define "berth.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "berth.fullname" -}}
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

{{- define "berth.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The object name of one component: (dict "root" $ "component" "decision" ["suffix" "-metrics"]),
"<fullname>-<component><suffix>". The fullname is shortened, never the component or the suffix,
so that a long fullname still gives distinct names of at most 63 characters (a Service's name is a
DNS label).
*/}}
{{- define "berth.componentName" -}}
{{- $tail := printf "-%s%s" .component (.suffix | default "") -}}
{{- printf "%s%s" (include "berth.fullname" .root | trunc (int (sub 63 (len $tail))) | trimSuffix "-") $tail -}}
{{- end -}}

{{- define "berth.selectorLabels" -}}
app.kubernetes.io/name: {{ include "berth.name" .root }}
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
- name: BERTH_KAFKA__TOPIC_PREFIX
  value: {{ $kafka.topicPrefix | default "" | quote }}
- name: BERTH_KAFKA__GROUP_PREFIX
  value: {{ $kafka.groupPrefix | default "" | quote }}
- name: BERTH_KAFKA__CELLS
  value: {{ $kafka.cells | default 2 | quote }}
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
{{- if .Values.database.tls.existingSecret }}
- name: BERTH_DATABASE__SSLROOTCERT
  value: /etc/berth/database-tls/{{ .Values.database.tls.caKey }}
{{- end }}
{{- end -}}

{{- define "berth.databaseTlsVolume" -}}
{{- if .Values.database.tls.existingSecret }}
- name: database-tls
  secret:
    secretName: {{ .Values.database.tls.existingSecret | quote }}
{{- end }}
{{- end -}}

{{- define "berth.databaseTlsMount" -}}
{{- if .Values.database.tls.existingSecret }}
- name: database-tls
  mountPath: /etc/berth/database-tls
  readOnly: true
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

{{/*
Pod settings: the chart-wide value (top level of values.yaml) and a service's own, called with
(dict "root" $ "values" <the service's values>). Maps merge key by key, recursively, the service's
keys winning (podSecurityContext, securityContext, resources, podLabels, podAnnotations,
nodeSelector); tolerations, affinity and priorityClassName are replaced by the service's own when
it sets one. Lists are never merged.
*/}}
{{- define "berth.merged" -}}
{{- $chartWide := index .root.Values .key | default dict -}}
{{- $own := index .values .key | default dict -}}
{{- with mergeOverwrite (deepCopy $chartWide) (deepCopy $own) }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{- define "berth.podSecurityContext" -}}
{{- include "berth.merged" (dict "root" .root "values" .values "key" "podSecurityContext") -}}
{{- end -}}

{{- define "berth.containerSecurityContext" -}}
{{- include "berth.merged" (dict "root" .root "values" .values "key" "securityContext") -}}
{{- end -}}

{{- define "berth.resources" -}}
{{- include "berth.merged" (dict "root" .root "values" .values "key" "resources") -}}
{{- end -}}

{{- define "berth.podLabels" -}}
{{- include "berth.merged" (dict "root" .root "values" .values "key" "podLabels") -}}
{{- end -}}

{{- define "berth.podAnnotations" -}}
{{- include "berth.merged" (dict "root" .root "values" .values "key" "podAnnotations") -}}
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

{{/* Where a pod may run, and its image pull secrets: (dict "root" $ "values" <service values>). */}}
{{- define "berth.scheduling" -}}
{{- $root := .root -}}
{{- with .values.priorityClassName | default $root.Values.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with include "berth.merged" (dict "root" .root "values" .values "key" "nodeSelector") }}
nodeSelector:
  {{- . | nindent 2 }}
{{- end }}
{{- with .values.tolerations | default $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity | default $root.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* An httpGet probe on the health port: (dict "path" "/livez" "probe" <values of the probe>). */}}
{{- define "berth.probe" -}}
httpGet: {path: {{ .path }}, port: health}
{{- range $field := list "initialDelaySeconds" "periodSeconds" "timeoutSeconds" "successThreshold" "failureThreshold" }}
{{- if hasKey $.probe $field }}
{{ $field }}: {{ index $.probe $field }}
{{- end }}
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
decision: {component: decision, kubernetes: false, database: false, config: true, args: [--config, /etc/berth/config/scheduler.yaml, --pools, /etc/berth/config/pools.yaml{{ if .Values.descheduler.policy }}, --descheduler-policy, /etc/berth/config/descheduler-policy.yaml, --descheduling-interval, {{ .Values.descheduler.intervalSeconds | quote }}, --descheduling-cooldown, {{ .Values.descheduler.cooldownSeconds | quote }}{{ end }}]}
binder: {component: binder, kubernetes: true, database: false, config: false, args: [--backend, kube, --qps, {{ .Values.binder.qps | quote }}, --burst, {{ .Values.binder.burst | quote }}]}
audit: {component: audit, kubernetes: false, database: true, config: false, args: []}
{{- end -}}
