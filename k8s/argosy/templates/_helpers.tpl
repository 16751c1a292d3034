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
- name: ARGOSY_AFTER_JOB           # a pod restarted after its job ended waits for the next one
  value: "wait"
{{- end -}}

{{/* Volumes every Argosy pod has: the store (served mode: a pod-local emptyDir the fetch-store step
fills; staged/shared: the ReadWriteMany PVC) and a writable /tmp (root fs is read-only). */}}
{{- define "argosy.volumes" -}}
- name: store
{{- if eq .Values.store.mode "served" }}
  emptyDir:
    sizeLimit: {{ .Values.store.localSize }}
{{- else }}
  persistentVolumeClaim:
    claimName: {{ include "argosy.pvcName" . }}
{{- end }}
- name: tmp
  emptyDir: {}
{{- end -}}

{{/* URL of the store pod (served mode). */}}
{{- define "argosy.storeUrl" -}}
http://{{ include "argosy.fullname" . }}-store:{{ .Values.store.port }}
{{- end -}}

{{/* served mode: the init step of every pod that reads the store; copies the whole store from the
store pod into the pod's own store volume, with a deadline (store.fetchTimeoutSeconds). */}}
{{- define "argosy.fetchStore" -}}
{{- if eq .Values.store.mode "served" }}
- name: fetch-store
  image: {{ include "argosy.image" (dict "root" . "role" "partitioner") }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["python", "/app/docker/store_server.py", "fetch", "--url", {{ include "argosy.storeUrl" . | quote }},
            "--dest", {{ .Values.store.mountPath | quote }}, "--timeout", {{ .Values.store.fetchTimeoutSeconds | quote }}]
  resources:
    requests: {cpu: 100m, memory: 128Mi}
    limits: {memory: 512Mi}
  {{- include "argosy.containerSecurityContext" . | nindent 2 }}
  volumeMounts:
    - name: store
      mountPath: {{ .Values.store.mountPath }}
{{- end }}
{{- end -}}

{{/* The partitioner's environment (the store pod's init step in served mode, the partitioner Job otherwise). */}}
{{- define "argosy.partitionerEnv" -}}
{{- $p := .Values.partitioner }}
{{- $mnt := .Values.store.mountPath }}
- name: HOME
  value: /tmp
- name: ARGOSY_STORE
  value: {{ printf "%s/store" $mnt | quote }}
- name: ARGOSY_INPUT
  value: {{ if $p.input }}{{ if hasPrefix "/" $p.input }}{{ $p.input | quote }}{{ else }}{{ printf "%s/%s" $mnt $p.input | quote }}{{ end }}{{ else }}""{{ end }}
- name: ARGOSY_DEMO_NODES
  value: {{ $p.demoNodes | quote }}
- name: ARGOSY_PARTS
  value: {{ $p.parts | quote }}
- name: ARGOSY_PARTITION_METHOD
  value: {{ $p.method | quote }}
- name: ARGOSY_REPARTITION
  value: {{ ternary "1" "0" $p.repartition | quote }}
- name: ARGOSY_MAX_EDGE_BALANCE
  value: {{ $p.maxEdgeBalance | default "" | quote }}
- name: ARGOSY_RANDOM_FEATURES
  value: {{ if $p.randomFeatures }}{{ $p.randomFeatures | quote }}{{ else }}""{{ end }}
{{- range $env, $key := dict "ARGOSY_FEATURES" "features" "ARGOSY_LABELS" "labels" "ARGOSY_TRAIN_MASK" "trainMask" "ARGOSY_VAL_MASK" "valMask" "ARGOSY_TEST_MASK" "testMask" }}
{{- $f := index $p.sideFiles $key | default "" }}
- name: {{ $env }}
  value: {{ if $f }}{{ if hasPrefix "/" $f }}{{ $f | quote }}{{ else }}{{ printf "%s/%s" $mnt $f | quote }}{{ end }}{{ else }}""{{ end }}
{{- end }}
- name: ARGOSY_PARTITION_ARGS
  value: {{ $p.extraArgs | default "" | quote }}
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
