{{- define "cedarberg.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cedarberg.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "cedarberg.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cedarberg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cedarberg.labels" -}}
{{ include "cedarberg.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "cedarberg.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cedarberg.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret and key holding the registry URL. */}}
{{- define "cedarberg.storeSecret" -}}
{{- if .Values.store.existingSecret -}}
{{- .Values.store.existingSecret -}}
{{- else -}}
{{- include "cedarberg.fullname" . -}}
{{- end -}}
{{- end -}}
{{- define "cedarberg.storeSecretKey" -}}
{{- if .Values.store.existingSecret -}}{{ .Values.store.existingSecretKey }}{{- else -}}store-url{{- end -}}
{{- end -}}

{{- define "cedarberg.redisSecret" -}}
{{- if .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecret -}}
{{- else -}}
{{- include "cedarberg.fullname" . -}}
{{- end -}}
{{- end -}}
{{- define "cedarberg.redisSecretKey" -}}
{{- if .Values.redis.existingSecret -}}{{ .Values.redis.existingSecretKey }}{{- else -}}redis-url{{- end -}}
{{- end -}}

{{- define "cedarberg.hasRedis" -}}
{{- if or .Values.redis.existingSecret .Values.redis.url -}}true{{- end -}}
{{- end -}}

{{- define "cedarberg.scheme" -}}
{{- if .Values.tls.allowPlainHttp -}}HTTP{{- else -}}HTTPS{{- end -}}
{{- end -}}

{{/* Fail early on combinations the gateway would refuse or that lose data. */}}
{{- define "cedarberg.validate" -}}
{{- if and (not .Values.store.existingSecret) (not .Values.store.url) -}}
{{- fail "store.existingSecret or store.url is required (a PostgreSQL URL: the pods share one registry)" -}}
{{- end -}}
{{- if and (or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled (gt (int .Values.workers) 1)) (not (include "cedarberg.hasRedis" .)) -}}
{{- fail "redis.existingSecret or redis.url is required with several pods or workers: rate limits must be one shared budget" -}}
{{- end -}}
{{- if and (eq .Values.kms.provider "local") (or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled) -}}
{{- fail "kms.provider local keeps the KEK in one pod's volume: use a KMS with several replicas" -}}
{{- end -}}
{{- if and (eq .Values.kms.provider "local") (not .Values.persistence.enabled) -}}
{{- fail "kms.provider local needs persistence.enabled: losing the key file loses every table" -}}
{{- end -}}
{{- if not (hasPrefix (printf "%s://" .Values.kms.provider) .Values.kms.kek) -}}
{{- fail (printf "kms.kek must be a %s:// URI" .Values.kms.provider) -}}
{{- end -}}
{{- if and .Values.migrations.hook (not .Values.store.existingSecret) -}}
{{- fail "migrations.hook needs store.existingSecret (the hook runs before this release's own Secret exists)" -}}
{{- end -}}
{{- if and (not .Values.tls.allowPlainHttp) (not .Values.tls.secretName) -}}
{{- fail "tls.secretName is required (or tls.allowPlainHttp: true, UNSAFE)" -}}
{{- end -}}
{{- end -}}

{{/* The gateway's configuration file, built as a dict and written with toToml. */}}
{{- define "cedarberg.config" -}}
{{- $v := .Values -}}
{{- $tls := dict -}}
{{- if $v.tls.allowPlainHttp -}}
{{- $_ := set $tls "allow_plain_http" true -}}
{{- else -}}
{{- $_ := set $tls "cert_file" "/etc/cedarberg/tls/tls.crt" -}}
{{- $_ := set $tls "key_file" "/etc/cedarberg/tls/tls.key" -}}
{{- end -}}
{{- $kms := dict "kek" $v.kms.kek "timeout_seconds" $v.kms.timeoutSeconds -}}
{{- if eq $v.kms.provider "vault-transit" -}}
{{- $vault := dict "tls" $v.kms.vault.tls -}}
{{- if $v.kms.vault.caSecret -}}{{- $_ := set $vault "ca_file" "/etc/cedarberg/vault-ca/ca.crt" -}}{{- end -}}
{{- $_ := set $kms "vault" $vault -}}
{{- else if eq $v.kms.provider "aws-kms" -}}
{{- $aws := dict -}}
{{- if $v.kms.aws.region -}}{{- $_ := set $aws "region" $v.kms.aws.region -}}{{- end -}}
{{- if $v.kms.aws.endpointUrl -}}{{- $_ := set $aws "endpoint_url" $v.kms.aws.endpointUrl -}}{{- end -}}
{{- $_ := set $kms "aws" $aws -}}
{{- else if eq $v.kms.provider "gcp-kms" -}}
{{- if $v.kms.gcp.credentialsSecret -}}
{{- $_ := set $kms "gcp" (dict "credentials_file" "/etc/cedarberg/gcp/credentials.json") -}}
{{- end -}}
{{- else if eq $v.kms.provider "azure-kv" -}}
{{- $azure := dict -}}
{{- if $v.kms.azure.tenantId -}}{{- $_ := set $azure "tenant_id" $v.kms.azure.tenantId -}}{{- end -}}
{{- if $v.kms.azure.clientId -}}{{- $_ := set $azure "client_id" $v.kms.azure.clientId -}}{{- end -}}
{{- $_ := set $kms "azure" $azure -}}
{{- end -}}
{{- $config := dict
  "host" "0.0.0.0"
  "port" 8181
  "data_dir" "/var/lib/cedarberg"
  "workers" (int $v.workers)
  "shutdown_timeout_seconds" (int $v.shutdownTimeoutSeconds)
  "log_level" $v.logLevel
  "log_format" "json"
  "migrate_on_start" (not $v.migrations.hook)
  "store_pool_size" (int $v.store.poolSize)
  "store_max_overflow" (int $v.store.maxOverflow)
  "default_warehouse" $v.defaultWarehouse
  "warehouses" $v.warehouses
  "tls" $tls
  "tokens" (dict "key_file" (printf "/etc/cedarberg/token/%s" $v.tokens.signingKeySecretKey) "ttl_seconds" (int $v.tokens.ttlSeconds))
  "authz" (dict "policy_dir" "/etc/cedarberg/policies" "reload_interval_seconds" $v.policies.reloadIntervalSeconds)
  "rate_limits" (dict "per_address" $v.rateLimits.perAddress "read" $v.rateLimits.read "write" $v.rateLimits.write "admin" $v.rateLimits.admin "token" $v.rateLimits.token)
  "kms" $kms
-}}
{{- if $v.oidc.issuers -}}
{{- $_ := set $config "oidc" (dict "issuers" $v.oidc.issuers) -}}
{{- end -}}
{{- toToml (mergeOverwrite $config $v.extraConfig) -}}
{{- end -}}

{{/* Secrets the gateway reads from its environment (never from the ConfigMap). */}}
{{- define "cedarberg.env" -}}
- name: CEDARBERG_STORE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "cedarberg.storeSecret" . }}
      key: {{ include "cedarberg.storeSecretKey" . }}
{{- if include "cedarberg.hasRedis" . }}
- name: CEDARBERG_RATE_LIMITS__STORAGE_URI
  valueFrom:
    secretKeyRef:
      name: {{ include "cedarberg.redisSecret" . }}
      key: {{ include "cedarberg.redisSecretKey" . }}
{{- end }}
{{- if and (eq .Values.kms.provider "vault-transit") .Values.kms.vault.tokenSecret.name }}
- name: CEDARBERG_KMS__VAULT__TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kms.vault.tokenSecret.name }}
      key: {{ .Values.kms.vault.tokenSecret.key }}
{{- end }}
{{- if and (eq .Values.kms.provider "azure-kv") .Values.kms.azure.clientSecretSecret.name }}
- name: CEDARBERG_KMS__AZURE__CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kms.azure.clientSecretSecret.name }}
      key: {{ .Values.kms.azure.clientSecretSecret.key }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}
