package api

import "strings"

// Event types the daemon publishes. A subscriber names them in
// subscribe.events; "*" subscribes to every type.
const (
	EventCapabilityRegistered   = "capability.registered"
	EventCapabilityUnregistered = "capability.unregistered"
	EventCapabilityInvoked      = "capability.invoked"
	EventAppConnected           = "app.connected"
	EventAppDisconnected        = "app.disconnected"
	EventAppUnresponsive        = "app.unresponsive"
	EventAppResponsive          = "app.responsive"
	EventAppRevoked             = "app.revoked"
	EventAppAllowed             = "app.allowed"
	EventAdapterRegistered      = "adapter.registered"

	EventConfirmationRequested = "confirmation.requested"
	EventConfirmationApproved  = "confirmation.approved"
	EventConfirmationDenied    = "confirmation.denied"
	EventConfirmationExpired   = "confirmation.expired"

	EventJobQueued    = "job.queued"
	EventJobRunning   = "job.running"
	EventJobDone      = "job.done"
	EventJobFailed    = "job.failed"
	EventJobUndone    = "job.undone"
	EventJobCancelled = "job.cancelled"

	// Events adapters emit.
	EventSurfaceCreated         = "surface.created"
	EventSurfaceDestroyed       = "surface.destroyed"
	EventSurfaceFocusChanged    = "surface.focus_changed"
	EventSurfaceTitleChanged    = "surface.title_changed"
	EventElementStateChanged    = "element.state_changed"
	EventElementValueChanged    = "element.value_changed"
	EventElementChildrenChanged = "element.children_changed"

	// EventAll matches every event type.
	EventAll = "*"
)

// EventTypes lists every event type the daemon knows, sorted.
var EventTypes = []string{
	EventAdapterRegistered,
	EventAppAllowed,
	EventAppConnected,
	EventAppDisconnected,
	EventAppResponsive,
	EventAppRevoked,
	EventAppUnresponsive,
	EventCapabilityInvoked,
	EventCapabilityRegistered,
	EventCapabilityUnregistered,
	EventConfirmationApproved,
	EventConfirmationDenied,
	EventConfirmationExpired,
	EventConfirmationRequested,
	EventElementChildrenChanged,
	EventElementStateChanged,
	EventElementValueChanged,
	EventJobCancelled,
	EventJobDone,
	EventJobFailed,
	EventJobQueued,
	EventJobRunning,
	EventJobUndone,
	EventSurfaceCreated,
	EventSurfaceDestroyed,
	EventSurfaceFocusChanged,
	EventSurfaceTitleChanged,
}

// InAdapterEventNamespace reports whether name is in the namespaces of the
// events adapters emit (surface.*, element.*): a notification so named,
// sent by an adapter's connection, reports such an event.
func InAdapterEventNamespace(name string) bool {
	return strings.HasPrefix(name, "surface.") || strings.HasPrefix(name, "element.")
}

// KnownEventType reports whether t is an event type the daemon publishes.
func KnownEventType(t string) bool {
	for _, e := range EventTypes {
		if e == t {
			return true
		}
	}
	return false
}
