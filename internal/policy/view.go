package policy

import (
	"encoding/json"
	"fmt"
	"time"
)

// CapabilityInput is one registered capability as View needs it: what
// its manifest declares.
type CapabilityInput struct {
	CapabilityID string
	AppID        string
	Name         string
	TrustLevel   string // declared trust level
	TimeoutMS    int64  // declared timeout_ms; 0: none
}

// CapabilityView is the effective policy of one capability.
type CapabilityView struct {
	CapabilityID string                `json:"capability_id"`
	AppID        string                `json:"app_id"`
	Name         string                `json:"name"`
	Declared     string                `json:"declared"` // the manifest's trust level
	TrustLevel   Valued[string]        `json:"trust_level"`
	Timeout      Valued[time.Duration] `json:"timeout"`
}

// View is the effective policy as `pcpctl policy show` prints it.
type View struct {
	Path               string                `json:"path"`
	Loaded             bool                  `json:"loaded"`          // false: no file, built-in defaults
	Source             string                `json:"source"`          // the invocation source the rows are for
	Agent              string                `json:"agent,omitempty"` // the contained agent they are for, if any
	Limits             Limits                `json:"limits"`
	ConfirmationExpiry Valued[time.Duration] `json:"confirmation_expiry"`
	Scomp              ScompLimits           `json:"scomp"` // for Agent's scomp sessions
	Tier3              Valued[string]        `json:"tier3"` // for apps without a tier3 of their own
	Capabilities       []CapabilityView      `json:"capabilities"`
}

// View computes the effective policy of caps invoked from source, one
// row per element of caps in the same order, plus the global settings.
func (p *Policy) View(caps []CapabilityInput, source string) View {
	return p.ViewFor(caps, source, "")
}

// ViewFor is View for requests from the contained agent named agent.
func (p *Policy) ViewFor(caps []CapabilityInput, source, agent string) View {
	v := View{
		Path:               p.path,
		Loaded:             p.loaded,
		Source:             source,
		Agent:              agent,
		Limits:             p.Limits(),
		ConfirmationExpiry: p.ConfirmationExpiry(),
		Scomp:              p.Scomp(agent),
		Tier3:              p.Tier3(""),
		Capabilities:       make([]CapabilityView, 0, len(caps)),
	}
	for _, c := range caps {
		d := p.DecideFor(agent, c.AppID, c.Name, source, c.TrustLevel, c.TimeoutMS)
		v.Capabilities = append(v.Capabilities, CapabilityView{
			CapabilityID: c.CapabilityID,
			AppID:        c.AppID,
			Name:         c.Name,
			Declared:     c.TrustLevel,
			TrustLevel:   d.TrustLevel,
			Timeout:      d.Timeout,
		})
	}
	return v
}

// valuedJSON is the wire form of a Valued.
type valuedJSON struct {
	Value any    `json:"value"`
	From  string `json:"from"`
}

// MarshalJSON writes {"value": ..., "from": ...}, a time.Duration value
// as a duration string such as "30s".
func (v Valued[T]) MarshalJSON() ([]byte, error) {
	var val any = v.Value
	if d, ok := val.(time.Duration); ok {
		val = formatDuration(d)
	}
	return json.Marshal(valuedJSON{val, v.From})
}

// UnmarshalJSON reads what MarshalJSON writes; a time.Duration value may
// be any time.ParseDuration string.
func (v *Valued[T]) UnmarshalJSON(data []byte) error {
	var raw struct {
		Value json.RawMessage `json:"value"`
		From  string          `json:"from"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if d, ok := any(&v.Value).(*time.Duration); ok {
		var s string
		if err := json.Unmarshal(raw.Value, &s); err != nil {
			return fmt.Errorf("policy: duration value: %w", err)
		}
		parsed, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("policy: duration value: %w", err)
		}
		*d = parsed
	} else if len(raw.Value) > 0 {
		if err := json.Unmarshal(raw.Value, &v.Value); err != nil {
			return err
		}
	}
	v.From = raw.From
	return nil
}
