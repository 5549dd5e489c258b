package atspi

import (
	"encoding/json"
	"os/exec"
	"testing"
)

func TestRoleName(t *testing.T) {
	for _, tc := range []struct {
		role uint32
		want string
	}{
		{0, "invalid"}, {7, "check box"}, {23, "frame"}, {43, "push button"}, {61, "text"},
		{75, "application"}, {77, "editbar"}, {98, "list box"}, {129, "push button menu"},
		{130, "switch"}, {131, "unknown"}, {1 << 31, "unknown"},
	} {
		if got := RoleName(tc.role); got != tc.want {
			t.Errorf("RoleName(%d) = %q, want %q", tc.role, got, tc.want)
		}
	}
}

// TestRoleTableMatchesLibatspi compares the table with the role names the
// installed libatspi gives (Debian's python3-gi and gir1.2-atspi-2.0, as
// scripts/desktop installs them).
func TestRoleTableMatchesLibatspi(t *testing.T) {
	const script = `
import json, gi
gi.require_version("Atspi", "2.0")
from gi.repository import Atspi
n = int(Atspi.Role.LAST_DEFINED)
print(json.dumps({"roles": [Atspi.role_get_name(Atspi.Role(i)) for i in range(n)],
                  "states": [Atspi.StateType(i).value_nick for i in range(int(Atspi.StateType.LAST_DEFINED))]}))
`
	out, err := exec.Command("/usr/bin/python3", "-c", script).Output()
	if err != nil {
		if testing.Short() {
			t.Skipf("-short: libatspi's Python bindings: %v", err)
		}
		t.Fatalf("running libatspi's Python bindings (install python3-gi gir1.2-atspi-2.0, as scripts/desktop does): %v", err)
	}
	var got struct{ Roles, States []string }
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Roles) > len(roleNames) {
		t.Errorf("libatspi knows %d roles, the table %d", len(got.Roles), len(roleNames))
	}
	for i, name := range got.Roles {
		if i < len(roleNames) && roleNames[i] != name {
			t.Errorf("role %d: table %q, libatspi %q", i, roleNames[i], name)
		}
	}
	for i, name := range got.States {
		if i >= len(stateNames) || stateNames[i] != name {
			t.Errorf("state %d: libatspi %q, table %q", i, name, stateNames[min(i, len(stateNames)-1)])
		}
	}
}

func TestRoleMatches(t *testing.T) {
	for _, tc := range []struct {
		role uint32
		want string
		ok   bool
	}{
		{rolePushButton, "push button", true},
		{rolePushButton, "Push_Button", true},
		{rolePushButton, "push-button", true},
		{rolePushButton, "button", true},
		{62, "button", true}, // toggle button
		{roleCheckBox, "checkbox", true},
		{roleCheckBox, "check box", true},
		{roleText, "textbox", true},
		{roleText, "entry", false},
		{roleEntry, "textbox", true},
		{rolePageTab, "tab", true},
		{rolePushButton, "check box", false},
		{roleLabel, "", false},
	} {
		if got := roleMatches(tc.role, tc.want); got != tc.ok {
			t.Errorf("roleMatches(%s, %q) = %v, want %v", RoleName(tc.role), tc.want, got, tc.ok)
		}
	}
}

func TestRoleConstants(t *testing.T) {
	for role, name := range map[uint32]string{
		roleCheckBox: "check box", roleDial: "dial", roleFrame: "frame", roleLabel: "label", rolePageTab: "page tab",
		rolePushButton: "push button", roleScrollBar: "scroll bar", roleScrollPane: "scroll pane", roleSlider: "slider",
		roleSpinButton: "spin button", roleTerminal: "terminal", roleText: "text", roleViewport: "viewport",
		roleParagraph: "paragraph", roleApplication: "application", roleAutocomplete: "autocomplete", roleEditbar: "editbar",
		roleEntry: "entry", roleDocumentText: "document text", roleDocumentEmail: "document email",
	} {
		if got := RoleName(role); got != name {
			t.Errorf("role %d is %q, the constant says %q", role, got, name)
		}
	}
	for bit, name := range map[int]string{
		stActive: "active", stChecked: "checked", stDefunct: "defunct", stEditable: "editable", stFocused: "focused",
		stIconified: "iconified", stSensitive: "sensitive", stShowing: "showing", stVisible: "visible",
		stManagesDescendants: "manages-descendants", stReadOnly: "read-only",
	} {
		if stateNames[bit] != name {
			t.Errorf("state %d is %q, the constant says %q", bit, stateNames[bit], name)
		}
	}
}
