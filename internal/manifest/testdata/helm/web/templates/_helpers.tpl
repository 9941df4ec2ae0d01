{{- define "web.name" -}}{{ .Release.Name }}-{{ .Chart.Name }}{{- end -}}
