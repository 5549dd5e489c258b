package atspi

import "strings"

// roleNames is AT-SPI2's AtspiRole enumeration (atspi-constants.h), indexed
// by the number Accessible.GetRole and Cache.GetItems report, with the
// names atspi_role_get_name gives. Role names come from this table and
// never from GetRoleName: GTK 4.8 answers GetRoleName wrongly for some
// roles.
var roleNames = [...]string{
	"invalid", "accelerator label", "alert", "animation", "arrow", "calendar", "canvas",
	"check box", "check menu item", "color chooser", "column header", "combo box",
	"date editor", "desktop icon", "desktop frame", "dial", "dialog", "directory pane",
	"drawing area", "file chooser", "filler", "focus traversable", "font chooser", "frame",
	"glass pane", "html container", "icon", "image", "internal frame", "label",
	"layered pane", "list", "list item", "menu", "menu bar", "menu item", "option pane",
	"page tab", "page tab list", "panel", "password text", "popup menu", "progress bar",
	"push button", "radio button", "radio menu item", "root pane", "row header",
	"scroll bar", "scroll pane", "separator", "slider", "spin button", "split pane",
	"status bar", "table", "table cell", "table column header", "table row header",
	"tearoff menu item", "terminal", "text", "toggle button", "tool bar", "tool tip",
	"tree", "tree table", "unknown", "viewport", "window", "extended", "header", "footer",
	"paragraph", "ruler", "application", "autocomplete", "editbar", "embedded", "entry",
	"chart", "caption", "document frame", "heading", "page", "section",
	"redundant object", "form", "link", "input method window", "table row", "tree item",
	"document spreadsheet", "document presentation", "document text", "document web",
	"document email", "comment", "list box", "grouping", "image map", "notification",
	"info bar", "level bar", "title bar", "block quote", "audio", "video", "definition",
	"article", "landmark", "log", "marquee", "math", "rating", "timer", "static",
	"math fraction", "math root", "subscript", "superscript", "description list",
	"description term", "description value", "footnote", "content deletion",
	"content insertion", "mark", "suggestion", "push button menu", "switch",
}

// Role numbers the adapter treats specially.
const (
	roleCheckBox      uint32 = 7
	roleDial          uint32 = 15
	roleFrame         uint32 = 23
	roleLabel         uint32 = 29
	rolePageTab       uint32 = 37
	rolePushButton    uint32 = 43
	roleScrollBar     uint32 = 48
	roleScrollPane    uint32 = 49
	roleSlider        uint32 = 51
	roleSpinButton    uint32 = 52
	roleTerminal      uint32 = 60
	roleText          uint32 = 61
	roleViewport      uint32 = 68
	roleParagraph     uint32 = 73
	roleApplication   uint32 = 75
	roleAutocomplete  uint32 = 76
	roleEditbar       uint32 = 77
	roleEntry         uint32 = 79
	roleDocumentText  uint32 = 94
	roleDocumentEmail uint32 = 96
)

// RoleName returns the AT-SPI2 name of a role number; numbers past the
// table (a newer toolkit) are "unknown".
func RoleName(role uint32) string {
	if role < uint32(len(roleNames)) {
		return roleNames[role]
	}
	return "unknown"
}

// roleAliases lets a target name a role the way other accessibility APIs
// (ARIA, UIA) and newer AT-SPI2 releases do.
var roleAliases = map[string][]string{
	"button":      {"push button", "toggle button", "push button menu"},
	"checkbox":    {"check box", "check menu item"},
	"radio":       {"radio button", "radio menu item"},
	"combobox":    {"combo box"},
	"textbox":     {"text", "entry", "password text"},
	"textfield":   {"text", "entry", "password text"},
	"tab":         {"page tab"},
	"tablist":     {"page tab list"},
	"menuitem":    {"menu item", "check menu item", "radio menu item"},
	"spinbutton":  {"spin button"},
	"progressbar": {"progress bar"},
	"scrollbar":   {"scroll bar"},
	"cell":        {"table cell"},
}

// normRole folds a role as a caller may spell it ("push_button",
// "Push-Button", "push button") to the table's spelling.
func normRole(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.NewReplacer("_", " ", "-", " ").Replace(s)
	return strings.Join(strings.Fields(s), " ")
}

// roleMatches reports whether a node's role number matches a role a
// target names: the table's name, or an alias of it.
func roleMatches(role uint32, want string) bool {
	w := normRole(want)
	name := RoleName(role)
	if w == name {
		return true
	}
	for _, a := range roleAliases[strings.ReplaceAll(w, " ", "")] {
		if a == name {
			return true
		}
	}
	return false
}

// isTextRole reports whether a node of this role shows editable or
// document text, whose content the trees carry as the node's text.
// Password fields are left out: their text is a secret.
func isTextRole(role uint32) bool {
	switch role {
	case roleText, roleEntry, roleParagraph, roleTerminal, roleSpinButton, roleEditbar,
		roleAutocomplete, roleDocumentText, roleDocumentEmail:
		return true
	}
	return false
}

// isSettableRange reports whether set_value may write a node's Value
// (progress and level bars only display one).
func isSettableRange(role uint32) bool {
	switch role {
	case roleSlider, roleSpinButton, roleScrollBar, roleDial:
		return true
	}
	return false
}
