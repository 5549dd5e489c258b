package api

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Each detail struct lists its fields in the order of their JSON names,
// so that its encoding is the canonical one the audit chain hashes and
// the bytes do not depend on how the daemon built the detail.
func TestAuditDetailsAreCanonical(t *testing.T) {
	for _, v := range []any{
		AuditErrorDetail{}, AuditRegisterDetail{}, AuditInvokeDetail{}, AuditActionDetail{}, AuditAdapterDetail{},
		AuditRevokeDetail{}, AuditAllowDetail{}, AuditConfirmationDetail{}, AuditJobDetail{}, AuditPolicyDetail{}, AuditDashboardDetail{}, AuditAgentDetail{},
	} {
		typ := reflect.TypeOf(v)
		var names []string
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				t.Errorf("%s.%s has no JSON name", typ.Name(), f.Name)
			}
			names = append(names, name)
		}
		if !slices.IsSorted(names) {
			t.Errorf("%s fields are not sorted by JSON name: %v", typ.Name(), names)
		}
	}
}
