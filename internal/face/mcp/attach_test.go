package mcp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

func TestAttachmentsBecomeContentBlocks(t *testing.T) {
	png := bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, 1000)
	res := okResult(&api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"width":2}`), Attachments: []api.Attachment{
		{Name: "image", MediaType: "image/png", Data: png},
		{Name: "raw", MediaType: "application/octet-stream", Data: []byte("rgba")},
	}})
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		IsError bool `json:"isError"`
		Content []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Data     string `json:"data"`
			MIMEType string `json:"mimeType"`
			Resource struct {
				URI      string `json:"uri"`
				MIMEType string `json:"mimeType"`
				Blob     string `json:"blob"`
			} `json:"resource"`
		} `json:"content"`
		Structured struct {
			Status      string              `json:"status"`
			Attachments []api.AttachmentRef `json:"attachments"`
		} `json:"structuredContent"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.IsError || len(got.Content) != 3 {
		t.Fatalf("result %.300s: want three content blocks", raw)
	}
	if c := got.Content[1]; c.Type != "image" || c.MIMEType != "image/png" || c.Data != base64.StdEncoding.EncodeToString(png) {
		t.Errorf("block 1: %s %s, want the PNG as an image block", c.Type, c.MIMEType)
	}
	if r := got.Content[2].Resource; got.Content[2].Type != "resource" || r.URI != "pcp-attachment:raw" || r.Blob != base64.StdEncoding.EncodeToString([]byte("rgba")) {
		t.Errorf("block 2: %+v, want the raw bytes as an embedded blob", got.Content[2])
	}
	if s := got.Structured; s.Status != "success" || len(s.Attachments) != 2 || s.Attachments[0].Size != int64(len(png)) || s.Attachments[0].Data != nil {
		t.Errorf("structured content %+v, want the attachments described without their bytes", s)
	}
	if !strings.Contains(got.Content[0].Text, `"width":2`) {
		t.Errorf("text block %s, want the result's JSON", got.Content[0].Text)
	}

	big := okResult(&api.CapabilityResult{Status: api.StatusSuccess, Attachments: []api.Attachment{{Name: "image", MediaType: "image/png", Data: make([]byte, api.InlineAttachmentLimit+1)}}})
	if raw, _ := json.Marshal(big); !big.IsError || !strings.Contains(string(raw), `"limit":8388608`) {
		t.Errorf("over the inline limit: %.300s, want an INVALID_PARAMS error naming the limit", raw)
	}
}
