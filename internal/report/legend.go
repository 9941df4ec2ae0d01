package report

import (
	"cmp"
	"strings"
	"unicode"
)

// A timeline's legends: each group of lanes (action, pods, endpoints,
// failed requests) has one on its heading's row, right of the heading,
// which explains the bars and marks that the group draws in this chart,
// and only those. A swatch is drawn as the chart draws the thing itself,
// with the same classes.

// legendEntry says what a bar or mark of a class means.
type legendEntry struct {
	// class is the bar's or mark's class; shape is tick, cross,
	// diamond, dot or label for a mark, bar, thin or count (a bar with
	// its label) for a bar; caption for a label without a swatch, which
	// is shown when one of the entries after it in its group is.
	class, shape string
	label        string
}

// legendGroup is entries that start a row of a legend.
type legendGroup []legendEntry

// caption is a legendGroup's first entry that names what the others
// are on.
func caption(label string) legendEntry { return legendEntry{shape: "caption", label: label} }

// The legends' entries of each group of lanes, in the order they are
// shown.
var (
	actionLegend = []legendGroup{{
		{"drain", "bar", "node drain"},
		{"outage", "bar", "dependency outage"},
		{"recovering", "bar", "recovering after it"},
		{"capacity", "diamond", "fewest ready pods, as the rollout strategy allows"},
		{"capacity unknown", "diamond", "fewest ready pods"},
		{"capacity below", "diamond", "fewest ready pods, below what the rollout strategy allows"},
	}}
	podLegend = []legendGroup{
		{
			caption("bar:"),
			{phaseStarting, "bar", "starting"},
			{phaseReady, "bar", "ready"},
			{phaseUnready, "bar", "not ready"},
			{phaseStopping, "bar", "terminating"},
			{phasePreStop, "bar", "preStop hook"},
			{phaseSigterm, "bar", "after SIGTERM"},
			{phaseDown, "bar", "exited, restart pending"},
			{"signal", "tick", "SIGTERM"},
			{"hook", "tick", "preStop start, end"},
			{"killed", "cross", "killed (SIGKILL)"},
			{"exit", "label", "exit code"},
			{"backoff", "dot", "back-off"},
			{"evict", "diamond", "eviction, or its refusal"},
		},
		{
			caption("upper line:"),
			{"routed", "thin", "new connections routed to it by every node"},
			{"routed some", "thin", "by some nodes"},
			{"last", "diamond", "last request answered"},
		},
		{
			caption("lower line:"),
			{"listening", "thin", "its process listening"},
			{"listen", "tick", "began to listen"},
			{"drained", "dot", "drained (its log)"},
		},
	}
	endpointLegend = []legendGroup{{
		{"route", "count", "endpoints new connections go to"},
		{"route empty", "bar", "none: new connections refused"},
		{"change", "tick", "the view changed"},
	}}
)

// failLegend returns the failure chart's entries, one per class.
func failLegend() []legendGroup {
	var g legendGroup
	for _, c := range failClasses {
		g = append(g, legendEntry{"fail " + c.class, "bar", c.label})
	}
	return []legendGroup{g}
}

// legendItem is a placed entry: its swatch, a Bar or a Mark, and its
// label, LabelY the row's middle.
type legendItem struct {
	Bar            *chartBar
	Mark           *chartMark
	Label          string
	LabelX, LabelY float64
	// Caption is a label without a swatch.
	Caption bool
}

// The legend's geometry: rows legendRow high from plotLeft, an item's
// swatch legendSwatch wide, legendGap between two items.
const (
	legendRow    = 14.0
	legendSwatch = 16.0
	legendGap    = 14.0
)

// labelWidth estimates the width of s in the legend's 10 px labels,
// generously, so that two labels do not overlap in a wide font such as
// DejaVu Sans: the page cannot measure text without a script.
func labelWidth(s string) float64 {
	w := 0.0
	for _, r := range s {
		switch {
		case strings.ContainsRune("ijlftr .,:;()'-", r):
			w += 4
		case r == 'm' || r == 'w' || r == 'M' || r == 'W':
			w += 9.8
		case unicode.IsUpper(r):
			w += 7.6
		default:
			w += 6.4
		}
	}
	return w
}

// newLegend places, from y on, the entries of groups whose class one of
// lanes draws, each group from a new row, and returns them and the
// height of their rows: at least one row, the heading's.
func newLegend(groups []legendGroup, lanes []chartLane, y float64) ([]legendItem, float64) {
	drawn := map[string]string{} // class → the first label drawn with it
	see := func(class, label string) {
		if text, ok := drawn[class]; !ok || text == "" {
			drawn[class] = label
		}
	}
	for _, l := range lanes {
		for _, b := range l.Bars {
			see(b.Class, b.Label)
		}
		for _, m := range l.Marks {
			see(m.Class, m.Label)
		}
	}
	var items []legendItem
	x, row := plotLeft, 0
	for _, g := range groups {
		var shown []legendEntry
		for _, e := range g {
			if _, ok := drawn[e.class]; ok && e.shape != "caption" {
				shown = append(shown, e)
			}
		}
		if len(shown) == 0 {
			continue
		}
		if g[0].shape == "caption" {
			shown = append([]legendEntry{g[0]}, shown...)
		}
		if x > plotLeft {
			x, row = plotLeft, row+1
		}
		for _, e := range shown {
			text := drawn[e.class]
			w := legendSwatch + 5 + labelWidth(e.label)
			switch e.shape {
			case "caption":
				w = labelWidth(e.label) * 1.2 // bold
			case "label":
				w += labelWidth(text)
			}
			if x > plotLeft && x+w > plotRight {
				x, row = plotLeft, row+1
			}
			items = append(items, legendSwatchOf(e, text, round1(x), y+legendRow/2+float64(row)*legendRow))
			x += w + legendGap
		}
	}
	return items, float64(row+1) * legendRow
}

// legendSwatchOf draws e's swatch at x, its middle at y; text is the
// first label the chart draws with it (an exit code, an endpoint count),
// which the swatch shows.
func legendSwatchOf(e legendEntry, text string, x, y float64) legendItem {
	it := legendItem{Label: e.label, LabelX: round1(x + legendSwatch + 5), LabelY: y}
	mid := round1(x + legendSwatch/2)
	switch e.shape {
	case "caption":
		it.LabelX, it.Caption = x, true
	case "bar":
		it.Bar = &chartBar{X: x, Y: y - 4.5, W: legendSwatch, H: 9, Class: e.class}
	case "thin":
		it.Bar = &chartBar{X: x, Y: y - routedH/2, W: legendSwatch, H: routedH, Class: e.class}
	case "count":
		// html.tmpl draws a bar's label 10.5 below its top.
		it.Bar = &chartBar{X: x, Y: y - 7, W: legendSwatch, H: 13, Class: e.class, Label: cmp.Or(text, "n"), LabelX: round1(x + 3)}
	case "tick":
		it.Mark = &chartMark{X: mid, Y: y - 6, Y2: y + 6, Shape: "tick", Class: e.class}
	case "label":
		it.Mark = &chartMark{X: x - 5, Y: y + 3.5, Shape: "label", Class: e.class, Label: text}
		it.LabelX = round1(x + labelWidth(text) + 5)
	default:
		it.Mark = &chartMark{X: mid, Y: y, Shape: e.shape, Class: e.class}
	}
	return it
}
