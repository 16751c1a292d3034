{{/* Name prefix of every object: the release name (so `argosy scale --release R` finds R-sampler). */}}
{{- define "argosy.fullname" -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- end -}}

{{- define "argosy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: argosy
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: argosy
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "sampler") */}}
{{- define "argosy.selector" -}}
app.kubernetes.io/name: argosy
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Image of a role: (dict "root" $ "role" "sampler") */}}
{{- define "argosy.image" -}}
{{- $i := .root.Values.image -}}
{{- $tag := $i.tag | default .root.Chart.AppVersion -}}
{{- if eq .role "trainer" }}{{ $tag = printf "%s%s" $tag $i.trainerTagSuffix }}{{ end -}}
{{- if $i.registry }}{{ $i.registry }}/{{ end }}{{ $i.repository }}/{{ .role }}:{{ $tag }}
{{- end -}}

{{- define "argosy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-scaler" (include "argosy.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "argosy.redisSecretName" -}}
{{- default (printf "%s-redis" (include "argosy.fullname" .)) .Values.redis.auth.existingSecret -}}
{{- end -}}

{{- define "argosy.pvcName" -}}
{{- default (printf "%s-store" (include "argosy.fullname" .)) .Values.store.persistence.existingClaim -}}
{{- end -}}

{{/* Node pool placement: (dict "root" $ "pool" "cpu") */}}
{{- define "argosy.placement" -}}
{{- $p := index .root.Values.nodePools .pool -}}
{{- with $p.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $p.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $p.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "argosy.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "argosy.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* Environment shared by every Argosy container. */}}
{{- define "argosy.env" -}}
- name: ARGOSY_JOB
  value: {{ .Values.job.name | quote }}
{{- if .Values.redis.auth.enabled }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "argosy.redisSecretName" . }}
      key: {{ .Values.redis.auth.existingSecretKey }}
- name: ARGOSY_REDIS_URL
  value: "redis://:$(REDIS_PASSWORD)@{{ include "argosy.fullname" . }}-redis:{{ .Values.redis.port }}/0"
{{- else }}
- name: ARGOSY_REDIS_URL
  value: "redis://{{ include "argosy.fullname" . }}-redis:{{ .Values.redis.port }}/0"
{{- end }}
- name: ARGOSY_BIND_HOST           # the pod IP (the advertised address), not every interface
  value: "auto"
- name: ARGOSY_ADVERTISE_HOST
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: ARGOSY_SERVICE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: ARGOSY_LOG_LEVEL
  value: {{ .Values.job.logLevel | quote }}
- name: ARGOSY_SPEC_WAIT
  value: {{ .Values.job.specWaitSeconds | quote }}
- name: ARGOSY_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: ARGOSY_RELEASE
  value: {{ include "argosy.fullname" . | quote }}
- name: HOME                       # the root filesystem is read-only; /tmp is an emptyDir
  value: /tmp
{{- end -}}

{{/* Volumes every Argosy pod has: the store PVC and a writable /tmp (root fs is read-only). */}}
{{- define "argosy.volumes" -}}
- name: store
  persistentVolumeClaim:
    claimName: {{ include "argosy.pvcName" . }}
- name: tmp
  emptyDir: {}
{{- end -}}

{{/* Exec probes of a long-running role (docker/healthcheck.py). */}}
{{- define "argosy.probes" -}}
startupProbe:
  exec:
    command: ["python", "/app/docker/healthcheck.py", "live"]
  periodSeconds: 10
  failureThreshold: 30
readinessProbe:
  exec:
    command: ["python", "/app/docker/healthcheck.py", "ready"]
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
livenessProbe:
  exec:
    command: ["python", "/app/docker/healthcheck.py", "live"]
  periodSeconds: 30
  timeoutSeconds: 5
  failureThreshold: 4
{{- end -}}


{{/* Staged mode (store.mode=staged): a sampler/loader copies only the parts it owns from the store
volume into a pod-local emptyDir when it gets them (and again when parts move), then reads them
from there; parts are dealt per node (ARGOSY_HOST = the node name). shared mode: read in place. */}}
{{- define "argosy.stagedEnv" -}}
{{- if eq .Values.store.mode "staged" }}
- name: ARGOSY_HOST
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: ARGOSY_LOCAL_STORE
  value: /local/store
{{- end }}
{{- end -}}

{{- define "argosy.stagedMount" -}}
{{- if eq .Values.store.mode "staged" }}
- name: local-store
  mountPath: /local
{{- end }}
{{- end -}}

{{- define "argosy.stagedVolume" -}}
{{- if eq .Values.store.mode "staged" }}
- name: local-store
  emptyDir:
    sizeLimit: {{ .Values.store.localSize }}
{{- end }}
{{- end -}}
