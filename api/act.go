package api

import "encoding/json"

// ActParams are an agent's request to act on an element of a Tier 2
// surface, by its element id (from query.elements) or by a target the
// adapter resolves (what the element shows). The MCP face's pcp_act and
// the scomp face's act binding take them.
type ActParams struct {
	SurfaceID string          `json:"surface_id"`
	Action    string          `json:"action"`
	ElementID string          `json:"element_id,omitempty"`
	Target    *ActTarget      `json:"target,omitempty"`
	Value     json.RawMessage `json:"value,omitempty"`
}

// ActTarget names an element by its role, accessible name, text and
// states; the adapter acts on the one element that matches.
type ActTarget struct {
	Role   string   `json:"role,omitempty"`
	Name   string   `json:"name,omitempty"`
	Text   string   `json:"text,omitempty"`
	States []string `json:"states,omitempty"`
}
