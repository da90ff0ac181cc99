{{- define "cache.name" -}}{{ .Chart.Name }}-{{ .Values.maxmemory }}{{- end -}}
