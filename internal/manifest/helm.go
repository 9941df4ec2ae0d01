package manifest

import (
	"maps"
	"os"
	"path"
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

// HelmReleaseName is the release name charts are rendered with, the one
// `helm template` uses when it is given none.
const HelmReleaseName = "release-name"

// isChart reports whether dir holds a Helm chart.
func isChart(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, chartutil.ChartfileName))
	return err == nil && !fi.IsDir()
}

// renderChart renders the Helm chart in dir in process, as `helm template
// dir -f valueFiles…` does: release HelmReleaseName in namespace
// "default", the chart's values.yaml with valueFiles merged over it in
// order, the default capabilities, and the subcharts under its charts/
// directory. It needs no helm binary and no cluster; a template that calls
// lookup gets nothing. NOTES.txt and templates that render to nothing are
// left out.
//
// It returns the rendered documents, template by template in the order of
// their names, each placed in the template that rendered it: a line the
// template holds as it was rendered (a line without an action) is placed
// at that line, and any other line at its nearest such ancestor (see
// [source.place]). A template of a subchart that is an archive, or a
// directory not named as the subchart, is not a file to point at: its
// objects are placed at the dependencies field of dir's Chart.yaml.
func renderChart(dir string, valueFiles []string) ([]document, error) {
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
	sources := sourceFiles{}
	var docs []document
	for _, name := range slices.Sorted(maps.Keys(rendered)) {
		text := []byte(strings.TrimSpace(rendered[name]))
		if len(text) == 0 || path.Base(name) == "NOTES.txt" {
			continue
		}
		// Rendered names are the chart's name, then the template's path in
		// the chart: "web/templates/deployment.yaml",
		// "web/charts/redis/templates/master.yaml".
		file := filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(name, ch.Name()+"/")))
		src := &source{file: file}
		if template, err := os.ReadFile(file); err == nil {
			src.lines = alignLines(text, template)
		} else {
			chartFile := filepath.Join(dir, chartutil.ChartfileName)
			src = &source{file: chartFile, node: sources.at(chartFile, "dependencies")}
		}
		for _, doc := range splitDocuments(text) {
			doc.src = src
			docs = append(docs, doc)
		}
	}
	return docs, nil
}
