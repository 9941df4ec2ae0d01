package manifest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/getter"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HelmSuffix ends the name of the File that a Reader makes of a Helm
// chart's output: "charts/web" becomes "charts/web (helm template)". Lines
// in it are lines of that output, where each template's manifests follow
// a "# Source: chart/templates/…" comment.
const HelmSuffix = " (helm template)"

// HelmReleaseName is the release name charts are rendered with, the one
// `helm template` uses when it is given none.
const HelmReleaseName = "release-name"

// isChart reports whether dir holds a Helm chart.
func isChart(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, chartutil.ChartfileName))
	return err == nil && !fi.IsDir()
}

// RenderChart renders the Helm chart in dir in process, as `helm template
// dir -f valueFiles…` does: release HelmReleaseName in namespace
// "default", the chart's values.yaml with valueFiles merged over it in
// order, the default capabilities, and the subcharts under its charts/
// directory. It needs no helm binary and no cluster; a template that calls
// lookup gets nothing. NOTES.txt and templates that render to nothing are
// left out.
func RenderChart(dir string, valueFiles []string) ([]byte, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	opts := values.Options{ValueFiles: valueFiles}
	vals, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		return nil, err
	}
	release := chartutil.ReleaseOptions{Name: HelmReleaseName, Namespace: metav1.NamespaceDefault, Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(ch, vals, release, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	rendered, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(rendered))
	for name := range rendered {
		names = append(names, name)
	}
	slices.Sort(names)
	var b bytes.Buffer
	for _, name := range names {
		text := strings.TrimSpace(rendered[name])
		if text == "" || filepath.Base(name) == "NOTES.txt" {
			continue
		}
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", name, text)
	}
	return b.Bytes(), nil
}
