package manifest_test

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/closingtime-dev/closingtime/internal/manifest"
)

func ExampleParse() {
	data := []byte(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  template:
    spec:
      containers:
        - name: web
          image: registry.example/web:1.4
---
apiVersion: v1
kind: Service
metadata:
  name: web
  ports: [
`)
	objs, errs := manifest.Parse("web.yaml", data)
	for _, o := range objs {
		d := o.Obj.(*appsv1.Deployment)
		fmt.Printf("%s:%d: %s with %d replicas\n", o.File, o.Line, o, *d.Spec.Replicas)
		fmt.Println("replicas at line", o.FieldLine("spec.replicas"))
		fmt.Println("no readinessProbe; its container is at line", o.FieldLine("spec.template.spec.containers[0].readinessProbe"))
	}
	for _, err := range errs {
		fmt.Println(err)
	}
	// Output:
	// web.yaml:1: Deployment web with 3 replicas
	// replicas at line 6
	// no readinessProbe; its container is at line 10
	// web.yaml:17: did not find expected node content
}
