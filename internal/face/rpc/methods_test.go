package rpc

import (
	"slices"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

// The method table stays sorted (lookup is a binary search) and serves
// exactly the methods of api.Methods, spec 000's and the extensions, with
// their roles; PCP's own methods live outside the spec's namespaces.
func TestMethodTableSortedAndComplete(t *testing.T) {
	names := make([]string, len(methods))
	for i, m := range methods {
		names[i] = m.name
	}
	if !slices.IsSorted(names) {
		t.Errorf("method table is not sorted: %v", names)
	}
	if len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("method table has duplicates: %v", names)
	}
	var want []string
	for _, m := range api.Methods {
		if m.Name == api.MethodSessionAuthenticate {
			continue // the handler serves it before the table
		}
		want = append(want, m.Name)
		md := lookup(m.Name)
		if md == nil {
			t.Errorf("%s is in api.Methods but not served", m.Name)
			continue
		}
		if md.userOnly != (m.Role == api.RoleUser) {
			t.Errorf("%s: userOnly %v, want role %s", m.Name, md.userOnly, m.Role)
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("method table = %v\nwant api.Methods = %v", names, want)
	}
	for _, m := range api.SpecMethods {
		if lookup(m) == nil {
			t.Errorf("spec 000 method %s is not served", m)
		}
	}
	specPrefixes := []string{"register.", "query.", "invoke.", "subscribe.", "unsubscribe.", "revoke.", "health."}
	for _, n := range names {
		if slices.Contains(api.SpecMethods, n) {
			continue
		}
		for _, p := range specPrefixes {
			if strings.HasPrefix(n, p) {
				t.Errorf("extension method %s uses spec 000's namespace %s", n, p)
			}
		}
	}
	if !slices.IsSorted(api.SpecMethods) {
		t.Error("api.SpecMethods is not sorted")
	}
}
