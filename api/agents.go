package api

import (
	"errors"
	"fmt"
)

// Agents: each contained agent (pcpctl agent run) has a name and its own
// socket, which the user's control connection opens and closes. Every
// session on that socket speaks for that agent: its audit actor is
// "agent:<name>" and the policy's [agents.<name>] rules apply to it.

// AgentsOpenParams are agents.open's parameters.
type AgentsOpenParams struct {
	// Name is the agent's name; see ValidateAgentName.
	Name string `json:"name"`
}

// AgentsOpenResult is agents.open's answer.
type AgentsOpenResult struct {
	Name string `json:"name"`
	// Socket is the agent's own socket, in a 0700 directory of its own.
	Socket string `json:"socket"`
	// Hide lists the directories that hold PCP's own files (its runtime
	// directory with the control socket, the state directory, the
	// directory of the policy file, the trust directory), which the
	// agent's sandbox must hide.
	Hide []string `json:"hide"`
	// ReadOnly lists files the agent may see but must not change: pcpd's
	// own executable.
	ReadOnly []string `json:"read_only,omitempty"`
}

// AgentsCloseParams are agents.close's parameters.
type AgentsCloseParams struct {
	Name string `json:"name"`
}

// AgentsCloseResult is agents.close's answer.
type AgentsCloseResult struct {
	Name string `json:"name"`
	// Connections is how many of the agent's connections were closed.
	Connections int `json:"connections"`
}

// MaxAgentNameLen bounds an agent's name.
const MaxAgentNameLen = 64

// ValidateAgentName checks an agent's name (CheckAgentName) and answers
// INVALID_PARAMS naming the field "name".
func ValidateAgentName(name string) error {
	if name == "" {
		return MissingParam("name")
	}
	if err := CheckAgentName(name); err != nil {
		return InvalidParam("name", "%v", err)
	}
	return nil
}

// CheckAgentName checks an agent's name: 1 to 64 ASCII letters, digits,
// '.', '_' or '-', beginning with a letter or digit. The name is a
// directory name and a TOML key, so nothing else is allowed.
func CheckAgentName(name string) error {
	if name == "" {
		return errors.New("empty agent name")
	}
	if len(name) > MaxAgentNameLen {
		return fmt.Errorf("agent name is %d bytes, more than %d", len(name), MaxAgentNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("agent name %q: want letters, digits, '.', '_' or '-', beginning with a letter or digit", name)
		}
	}
	return nil
}
