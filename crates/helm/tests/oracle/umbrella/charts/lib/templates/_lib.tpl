{{- define "lib.greeting" -}}hello from {{ .Chart.Name }} in {{ .Values.global.region }}{{- end -}}
