package api

import (
	"slices"
	"testing"
)

// Methods is sorted (LookupMethod is a binary search), holds each method
// once and every method of spec 000.
func TestMethodsSortedAndComplete(t *testing.T) {
	names := make([]string, len(Methods))
	for i, m := range Methods {
		names[i] = m.Name
		if m.Role != RoleAgent && m.Role != RoleUser {
			t.Errorf("%s: role %q, want agent or user", m.Name, m.Role)
		}
		if got, ok := LookupMethod(m.Name); !ok || got != m {
			t.Errorf("LookupMethod(%s) = %+v, %v; want %+v", m.Name, got, ok, m)
		}
	}
	if !slices.IsSorted(names) {
		t.Errorf("Methods is not sorted: %v", names)
	}
	if len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("Methods has duplicates: %v", names)
	}
	for _, m := range SpecMethods {
		if !slices.Contains(names, m) {
			t.Errorf("spec 000 method %s is missing from Methods", m)
		}
	}
	ro := ReadOnlyMethods()
	if !slices.IsSorted(ro) || len(ro) == 0 {
		t.Errorf("ReadOnlyMethods() = %v, want a sorted, non-empty list", ro)
	}
	for _, name := range ro {
		if m, _ := LookupMethod(name); m.Role != RoleAgent {
			t.Errorf("read-only method %s is for the %s only", name, m.Role)
		}
	}
}

func TestAuditKindsSorted(t *testing.T) {
	if !slices.IsSorted(AuditKinds) || len(slices.Compact(slices.Clone(AuditKinds))) != len(AuditKinds) {
		t.Errorf("AuditKinds is not sorted or has duplicates: %v", AuditKinds)
	}
}

func TestCapabilityAppID(t *testing.T) {
	tests := []struct {
		id, app string
		ok      bool
	}{
		{"org.example.mail.send", "org.example.mail", true},
		{"pcp.inspection.ping", "pcp.inspection", true},
		{"system.lock", "system", true},
		{"send", "", false},
		{".send", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		app, ok := CapabilityAppID(tc.id)
		if app != tc.app || ok != tc.ok {
			t.Errorf("CapabilityAppID(%q) = %q, %v; want %q, %v", tc.id, app, ok, tc.app, tc.ok)
		}
		if ok && CapabilityID(app, tc.id[len(app)+1:]) != tc.id {
			t.Errorf("CapabilityID(%q, …) does not give back %q", app, tc.id)
		}
	}
}
