{{- define "helmisms.setInInclude" -}}
{{- $_ := set .Values "fromInclude" "inc" -}}
{{- end -}}
{{- define "helmisms.ctxValues" -}}
{{ toJson .Values }}
{{- end -}}
