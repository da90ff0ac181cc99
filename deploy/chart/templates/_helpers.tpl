{{/* The name of a component's objects: <release>-<component>. */}}
{{- define "berth.name" -}}
{{- printf "%s-%s" .root.Release.Name .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "berth.labels" -}}
app.kubernetes.io/name: berth
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* What selects a component's pods. */}}
{{- define "berth.selector" -}}
app.kubernetes.io/name: berth
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The in-cluster endpoint of a service component. */}}
{{- define "berth.endpoint" -}}
{{- printf "http://%s-%s:%v" .root.Release.Name .component .port -}}
{{- end -}}

{{/*
A berth service's Deployment. Parameters: root, component, role (its certificate's role),
replicas, args (the command line), env (extra variables, a list), database (the key of its URL
in the database Secret, or empty), ports (the container's ports), port (its gRPC port, probed
through the gRPC health service; without it, `probe`), serviceAccount (true: a ServiceAccount
with a token; false: none mounted), repositories (mount the repositories file), volumes and
mounts (extra), securityContext (the pod's), capabilities (added to the container's, which
drops all others), resources.
*/}}
{{- define "berth.deployment" -}}
{{- $root := .root -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "berth.name" . }}
  labels:
    {{- include "berth.labels" . | nindent 4 }}
spec:
  replicas: {{ .replicas }}
  selector:
    matchLabels:
      {{- include "berth.selector" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "berth.selector" . | nindent 8 }}
      annotations:
        checksum/repositories: {{ toYaml $root.Values.repositories | sha256sum }}
    spec:
      {{- if .serviceAccount }}
      serviceAccountName: {{ include "berth.name" . }}
      {{- else }}
      automountServiceAccountToken: false
      {{- end }}
      securityContext:
        {{- toYaml .securityContext | nindent 8 }}
      containers:
        - name: {{ .component }}
          image: {{ printf "%s:%s" $root.Values.image.repository $root.Values.image.tag | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- toYaml .args | nindent 12 }}
          env:
            # Where hookevent replicas reach each other (--advertise-endpoint's default).
            - name: POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            - name: BERTH_LOG_FORMAT
              value: {{ $root.Values.logFormat | quote }}
            {{- with $root.Values.otlpEndpoint }}
            - name: OTEL_EXPORTER_OTLP_ENDPOINT
              value: {{ . | quote }}
            {{- end }}
            - name: BERTH_BROKER
              value: {{ include "berth.endpoint" (dict "root" $root "component" "queue" "port" 7071) }}
            - name: BERTH_LIFECYCLE
              value: {{ include "berth.endpoint" (dict "root" $root "component" "lifecycle" "port" 7072) }}
            - name: BERTH_HOOKEVENT
              value: {{ include "berth.endpoint" (dict "root" $root "component" "hookevent" "port" 7073) }}
            - name: BERTH_RELEASE
              value: {{ include "berth.endpoint" (dict "root" $root "component" "release" "port" 7074) }}
            - name: BERTH_TLS_CA
              value: /certs/ca.pem
            - name: BERTH_TLS_CERT
              value: {{ printf "/certs/%s.pem" .role }}
            - name: BERTH_TLS_KEY
              value: {{ printf "/certs/%s-key.pem" .role }}
            {{- if .repositories }}
            - name: BERTH_REPOSITORIES
              value: /etc/berth/repositories.yaml
            {{- end }}
            {{- if .database }}
            - name: {{ printf "BERTH_%s_DATABASE" (upper .database) }}
              valueFrom:
                secretKeyRef:
                  name: {{ $root.Values.database.secret }}
                  key: {{ .database }}
            {{- end }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- with .ports }}
          ports:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
              {{- with .capabilities }}
              add:
                {{- toYaml . | nindent 16 }}
              {{- end }}
          {{- if .port }}
          # The gRPC health service over the service's own TLS (kubelet's grpc probe speaks
          # no TLS).
          readinessProbe:
            exec:
              command: ["berth", "--ca-file", "/certs/ca.pem", "health", {{ printf "https://127.0.0.1:%v" .port | quote }}, "--tls-server-name", {{ printf "%s.berth" .role | quote }}]
            periodSeconds: 10
            timeoutSeconds: 5
          livenessProbe:
            exec:
              command: ["berth", "--ca-file", "/certs/ca.pem", "health", {{ printf "https://127.0.0.1:%v" .port | quote }}, "--tls-server-name", {{ printf "%s.berth" .role | quote }}]
            initialDelaySeconds: 30
            periodSeconds: 20
            timeoutSeconds: 5
          {{- else if .probe }}
          livenessProbe:
            {{- toYaml .probe | nindent 12 }}
          {{- end }}
          {{- with .readiness }}
          readinessProbe:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          volumeMounts:
            - name: certs
              mountPath: /certs
              readOnly: true
            {{- if .repositories }}
            - name: repositories
              mountPath: /etc/berth
              readOnly: true
            {{- end }}
            {{- with .mounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        # Only this service's own key (and the CA).
        - name: certs
          secret:
            secretName: {{ $root.Values.certificatesSecret }}
            defaultMode: 0440
            items:
              - key: ca.pem
                path: ca.pem
              - key: {{ printf "%s.pem" .role }}
                path: {{ printf "%s.pem" .role }}
              - key: {{ printf "%s-key.pem" .role }}
                path: {{ printf "%s-key.pem" .role }}
        {{- if .repositories }}
        - name: repositories
          configMap:
            name: {{ include "berth.name" (dict "root" $root "component" "repositories") }}
        {{- end }}
        {{- with .volumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end -}}
