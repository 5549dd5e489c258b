package api

// DashboardLoginResult is dashboard.login's answer: a URL that logs one
// browser into the web dashboard. It works once, until ExpiresAt.
type DashboardLoginResult struct {
	URL string `json:"url"`
	// ExpiresAt is when the URL stops working if unused (RFC 3339).
	ExpiresAt string `json:"expires_at"`
}
