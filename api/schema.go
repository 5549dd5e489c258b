package api

import "encoding/json"

// ParamsSchema is the JSON Schema (2020-12) of a capability's parameters,
// as its manifest declares them: an object with one property per
// parameter (typed unless the type is TypeAny) and the required ones
// listed. Every face that describes a capability's input (MCP tools,
// scomp bindings) uses it, so they describe it alike.
func ParamsSchema(params []ParamDecl) json.RawMessage {
	type prop struct {
		Type        string `json:"type,omitempty"`
		Description string `json:"description,omitempty"`
	}
	props := map[string]prop{}
	required := []string{}
	for _, p := range params {
		pr := prop{Description: p.Description}
		if p.Type != TypeAny {
			pr.Type = p.Type
		}
		props[p.Name] = pr
		if p.IsRequired() {
			required = append(required, p.Name)
		}
	}
	raw, _ := json.Marshal(map[string]any{"type": "object", "properties": props, "required": required})
	return raw
}
