package atspi

import (
	"errors"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/pcp-dev/pcp/api"
)

func TestStrMatch(t *testing.T) {
	for _, tc := range []struct {
		have, want string
		score      int
	}{
		{"Open", "Open", matchExact},
		{"open", "Open", matchFolded},
		{"  Open   File ", "open file", matchFolded},
		{"2 2", "2", matchFolded}, // GTK 4.8 names a button after both labels
		{"mod mod", "mod", matchFolded},
		{"Open File", "file", matchSubstr},
		{"x2", "2", matchSubstr},
		{"Close", "Open", matchNone},
		{"", "Open", matchNone},
		{"Open", "", matchNone},
	} {
		if got := strMatch(tc.have, tc.want); got != tc.score {
			t.Errorf("strMatch(%q, %q) = %d, want %d", tc.have, tc.want, got, tc.score)
		}
	}
}

// testTree is a small window:
//
//	application
//	  frame "Main" (showing)
//	    panel
//	      push button "Open" (sensitive, showing)
//	      push button "open" (sensitive, showing)
//	      push button "Open File" (showing)
//	      check box "checkbutton" (checked, sensitive, showing)
//	      check box "checkbutton" (sensitive, showing)
//	      text "" text "hello world" (editable, showing)
//	    panel (hidden popover: no visible, no showing)
//	      push button "Volume Up" (visible)
//	    panel "Toolbar"
//	      push button "Volume Up" (visible, showing)
//	      push button "2 2" (visible)
//	      label "2"
func testTree() *tree {
	vis := stateSet(0).with(stVisible, true)
	show := vis.with(stShowing, true)
	sens := show.with(stSensitive, true)
	nodes := map[dbus.ObjectPath]*node{}
	add := func(p, parent dbus.ObjectPath, role uint32, name string, st stateSet) *node {
		n := &node{path: p, parent: parent, role: role, name: name, states: st}
		nodes[p] = n
		if pn := nodes[parent]; pn != nil {
			pn.children = append(pn.children, p)
		}
		return n
	}
	add(rootPath, "", roleApplication, "app", 0)
	add("/w", rootPath, roleFrame, "Main", show)
	add("/w/p", "/w", 39, "", show)
	add("/w/p/open", "/w/p", rolePushButton, "Open", sens)
	add("/w/p/open2", "/w/p", rolePushButton, "open", sens)
	add("/w/p/openfile", "/w/p", rolePushButton, "Open File", show)
	add("/w/p/cb1", "/w/p", roleCheckBox, "checkbutton", sens.with(stChecked, true))
	add("/w/p/cb2", "/w/p", roleCheckBox, "checkbutton", sens)
	add("/w/p/text", "/w/p", roleText, "", show.with(stEditable, true)).text = "hello world"
	add("/w/pop", "/w", 39, "", 0)
	add("/w/pop/vol", "/w/pop", rolePushButton, "Volume Up", vis)
	add("/w/tb", "/w", 39, "Toolbar", show)
	add("/w/tb/vol", "/w/tb", rolePushButton, "Volume Up", show)
	add("/w/tb/two", "/w/tb", rolePushButton, "2 2", vis)
	add("/w/tb/label2", "/w/tb", roleLabel, "2", vis)
	return &tree{bus: ":1.0", appID: "atspi.test", nodes: nodes, maxUp: 66}
}

func resolveIn(tr *tree, tg Target) ([]Match, error) {
	if err := tg.validate("target", 0); err != nil {
		return nil, err
	}
	top := best(tr.find(&tg))
	if len(top) > 1 {
		return top, ambiguous(&tg, top)
	}
	return top, nil
}

func TestTargetMatching(t *testing.T) {
	tr := testTree()
	for _, tc := range []struct {
		name   string
		target Target
		want   string // path of the one match; "" for none
		amb    int    // > 0: TARGET_AMBIGUOUS with this many candidates
	}{
		{"exact beats folded and substring", Target{Role: "push button", Name: "Open"}, "/w/p/open", 0},
		{"folded beats substring", Target{Role: "button", Name: "open file"}, "/w/p/openfile", 0},
		{"substring alone", Target{Role: "button", Name: "File"}, "/w/p/openfile", 0},
		{"folded ties are ambiguous", Target{Role: "button", Name: "OPEN"}, "", 2},
		{"same name twice is ambiguous", Target{Role: "check box", Name: "checkbutton"}, "", 2},
		{"states narrow it", Target{Role: "check box", Name: "checkbutton", States: []string{"!checked"}}, "/w/p/cb2", 0},
		{"states narrow it (set)", Target{Role: "checkbox", States: []string{"checked"}}, "/w/p/cb1", 0},
		{"visible beats hidden", Target{Role: "push button", Name: "Volume Up"}, "/w/tb/vol", 0},
		{"ancestor", Target{Name: "Volume Up", Ancestor: &Target{Role: "panel", Name: "Toolbar"}}, "/w/tb/vol", 0},
		{"GTK4 doubled label", Target{Role: "push button", Name: "2"}, "/w/tb/two", 0},
		{"exact label beats the button without a role", Target{Name: "2"}, "/w/tb/label2", 0},
		{"text", Target{Role: "text", Text: "hello"}, "/w/p/text", 0},
		{"no match", Target{Role: "push button", Name: "Save"}, "", 0},
		{"role alone, many", Target{Role: "push button"}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top, err := resolveIn(tr, tc.target)
			switch {
			case tc.amb > 0:
				var pe *api.Error
				if !errors.As(err, &pe) || pe.Code != api.CodeTargetAmbiguous {
					t.Fatalf("got %v, %v; want TARGET_AMBIGUOUS", top, err)
				}
				cands, _ := pe.Data.(map[string]any)["candidates"].([]map[string]any)
				if len(cands) != tc.amb {
					t.Errorf("got %d candidates, want %d: %v", len(cands), tc.amb, cands)
				}
				for _, c := range cands {
					for _, k := range []string{"element_id", "role", "name", "accessible_path"} {
						if _, ok := c[k]; !ok {
							t.Errorf("candidate %v lacks %s", c, k)
						}
					}
				}
			case tc.name == "role alone, many":
				if err == nil || len(top) < 2 {
					t.Errorf("got %v, %v; want ambiguous", top, err)
				}
			case tc.want == "":
				if len(top) != 0 || err != nil {
					t.Errorf("got %v, %v; want no match", top, err)
				}
			default:
				if err != nil || len(top) != 1 || top[0].Path != tc.want {
					t.Errorf("got %v, %v; want %s", top, err, tc.want)
				}
			}
		})
	}
}

func TestTargetRanking(t *testing.T) {
	tr := testTree()
	all := tr.find(&Target{Role: "push button", Name: "open"})
	best(all)
	var got []string
	for _, m := range all {
		got = append(got, m.Path)
	}
	want := []string{"/w/p/open2", "/w/p/open", "/w/p/openfile"}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("ranking %v, want %v", got, want)
	}
	if all[0].Score != matchExact || all[1].Score != matchFolded || all[2].Score != matchSubstr {
		t.Errorf("scores %d %d %d", all[0].Score, all[1].Score, all[2].Score)
	}
}

func TestTargetValidate(t *testing.T) {
	deep := &Target{Name: "x"}
	for i := 0; i < maxAncestorDepth+1; i++ {
		deep = &Target{Name: "x", Ancestor: deep}
	}
	for name, tg := range map[string]Target{
		"unknown state":    {States: []string{"shiny"}},
		"unknown role":     {Role: "spaceship"},
		"deep ancestors":   *deep,
		"bad ancestor":     {Ancestor: &Target{States: []string{"!nope"}}},
		"state invalid(0)": {States: []string{"invalid"}},
	} {
		err := tg.validate("target", 0)
		if !errors.Is(err, api.ErrInvalidParams) {
			t.Errorf("%s: got %v, want INVALID_PARAMS", name, err)
		}
	}
	ok := Target{Role: "Push_Button", States: []string{"SENSITIVE", "!checked", "multi line"}, Ancestor: &Target{Role: "frame"}}
	if err := ok.validate("target", 0); err != nil {
		t.Errorf("valid target: %v", err)
	}
}
