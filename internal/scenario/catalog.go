package scenario

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// catalogFS holds the built-in scenarios, one file each, listed in the
// order of their names: seed 001's numbered ones, seed 000's lettered ones,
// then the others (crash loops, budgets, probes, rollout strides), whose
// names begin in lower case.
//
//go:embed catalog/*.yaml
var catalogFS embed.FS

// Catalog returns the built-in scenarios, in order. Their manifests are
// inline: they name no files.
func Catalog() ([]*Scenario, error) {
	names, err := fs.Glob(catalogFS, "catalog/*.yaml")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var all []*Scenario
	var errs []error
	for _, name := range names {
		data, err := catalogFS.ReadFile(name)
		if err != nil {
			return nil, err
		}
		s, err := Parse(name, data, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if s.Name != strings.TrimSuffix(path.Base(name), ".yaml") {
			errs = append(errs, fmt.Errorf("%s: name %s differs from the file's", name, s.Name))
		}
		all = append(all, s)
	}
	return all, errors.Join(errs...)
}

// Select returns the scenarios of all that names lists, in the order of
// names; all of them if names is empty. A name is a scenario's name or a
// group's, which stands for every scenario of the group in the catalog's
// order. An unknown name is an error that lists the known ones.
func Select(all []*Scenario, names []string) ([]*Scenario, error) {
	if len(names) == 0 {
		return all, nil
	}
	var picked []*Scenario
	for _, n := range names {
		before := len(picked)
		for _, s := range all {
			if s.Name == n || s.Group == n {
				picked = append(picked, s)
			}
		}
		if len(picked) == before {
			var known []string
			for _, s := range all {
				if s.Group != "" && !slices.Contains(known, s.Group) {
					known = append(known, s.Group)
				}
				known = append(known, s.Name)
			}
			return nil, fmt.Errorf("no scenario %q; the catalog has %s", n, strings.Join(known, ", "))
		}
	}
	return picked, nil
}
