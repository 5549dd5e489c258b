package api

import "testing"

func TestParamsSchema(t *testing.T) {
	f := false
	got := string(ParamsSchema([]ParamDecl{{Name: "title", Type: "string", Description: "the title"}, {Name: "x", Type: "any", Required: &f}}))
	want := `{"properties":{"title":{"type":"string","description":"the title"},"x":{}},"required":["title"],"type":"object"}`
	if got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}
