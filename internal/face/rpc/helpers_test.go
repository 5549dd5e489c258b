package rpc

import (
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/services/inspection"
)

func addTestService(b *core.Broker) error { return b.AddService(inspection.New(b)) }
