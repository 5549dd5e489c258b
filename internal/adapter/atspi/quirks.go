package atspi

// Toolkit differences the adapter relies on, measured on Debian 12 (GTK
// 3.24 with at-spi2-atk 2.46, GTK 4.8). Application.ToolkitName tells
// the toolkits apart: GTK 3 with the ATK bridge says "gtk", GTK 4 "GTK".
const (
	toolkitGTK4 = "GTK"
)

// quirks are what the adapter does differently for one toolkit.
type quirks struct {
	// cacheOnReference: objects enter the toolkit's Cache only once a
	// client has referenced them (GTK4), so a first walk lists children
	// and then asks GetItems once, instead of describing each node.
	cacheOnReference bool
	// actionOnEveryNode: every widget has the Action interface, most with
	// no action (GTK4), so whether a node can be activated takes its
	// NActions. Elsewhere the interface means the node has actions (GTK3
	// adds it only to widgets that implement AtkAction).
	actionOnEveryNode bool
}

func quirksOf(toolkit string) quirks {
	if toolkit == toolkitGTK4 {
		return quirks{cacheOnReference: true, actionOnEveryNode: true}
	}
	return quirks{}
}
