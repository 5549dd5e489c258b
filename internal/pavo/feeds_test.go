package pavo

import (
	"testing"

	"github.com/pcp-dev/pcp/api"
)

func TestJobsFeed(t *testing.T) {
	t.Parallel()
	d := &Driver{Daemon: demoDaemon()}
	reply := d.Handle(t.Context(), []byte(`{"op":"jobs"}`))
	validate(t, "JobsReply", reply)
	want := `{"ok":true,"result":[` +
		`{"id":"job-1","title":"org.example.mail.purge","status":"queued","detail":"waiting out its undo window; runs at ` + t1 + ` unless undone","route":"/pcp/jobs","updated_at":"` + t0 + `",` +
		`"app_id":"org.example.mail","capability_id":"org.example.mail.purge","created_at":"` + t0 + `","kind":"job","requester":"agent:uid=1,pid=2","run_at":"` + t1 + `"},` +
		`{"id":"audit-4","title":"org.example.mail.send","status":"INVALID_PARAMS","detail":"invoke_admin by user:uid=1,pid=3: params.to: bad","route":"/pcp/audit","updated_at":"` + t1 + `",` +
		`"app_id":"org.example.mail","capability_id":"org.example.mail.send","duration_us":0,"kind":"execution","seq":4},` +
		`{"id":"audit-3","title":"org.example.mail.send","status":"APP_UNRESPONSIVE","detail":"invoke by agent:uid=1,pid=2 via native: not answering","route":"/pcp/audit","updated_at":"` + t1 + `",` +
		`"app_id":"org.example.mail","capability_id":"org.example.mail.send","duration_us":0,"kind":"execution","seq":3},` +
		`{"id":"audit-2","title":"org.example.mail.send","status":"success","detail":"invoke by agent:uid=1,pid=2 via native","route":"/pcp/audit","updated_at":"` + t0 + `",` +
		`"app_id":"org.example.mail","capability_id":"org.example.mail.send","duration_us":40,"kind":"execution","seq":2}]}`
	if string(reply) != want {
		t.Errorf("got  %s\nwant %s", reply, want)
	}
}

func TestNotificationsFeed(t *testing.T) {
	t.Parallel()
	d := &Driver{Daemon: demoDaemon()}
	reply := d.Handle(t.Context(), []byte(`{"op":"notifications"}`))
	validate(t, "NotificationsReply", reply)
	// The pending confirmation, the agent's failure and the failed job (not
	// the user's own invoke_admin), the revoked app.
	want := `{"ok":true,"result":[` +
		`{"id":"conf-2","title":"Confirm purge: org.example.mail.purge","body":"Purge the mailbox again","severity":"warning","route":"/pcp/confirmations","created_at":"` + t0 + `","read":false,` +
		`"app_id":"org.example.mail","capability_id":"org.example.mail.purge","expires_at":"` + t1 + `","kind":"confirmation","requester":"agent:uid=1,pid=2"},` +
		`{"id":"audit-5","title":"Job job-0 of org.example.mail.purge failed","body":"app went away","severity":"error","route":"/pcp/audit","created_at":"` + t1 + `","read":false,` +
		`"app_id":"org.example.mail","capability_id":"org.example.mail.purge","kind":"failure","outcome":"failed","seq":5},` +
		`{"id":"audit-3","title":"org.example.mail.send failed: APP_UNRESPONSIVE","body":"not answering","severity":"error","route":"/pcp/audit","created_at":"` + t1 + `","read":false,` +
		`"actor":"agent:uid=1,pid=2","app_id":"org.example.mail","capability_id":"org.example.mail.send","kind":"failure","outcome":"APP_UNRESPONSIVE","seq":3},` +
		`{"id":"revoked:org.example.bad","title":"org.example.bad is revoked","body":"spam","severity":"info","route":"/pcp/apps","created_at":"` + t0 + `","read":false,` +
		`"app_id":"org.example.bad","kind":"revocation"}]}`
	if string(reply) != want {
		t.Errorf("got  %s\nwant %s", reply, want)
	}
}

// TestFeedsFail: a feed that cannot read pcpd fails as a whole.
func TestFeedsFail(t *testing.T) {
	t.Parallel()
	d := &Driver{Daemon: demoDaemon().fail(api.MethodAuditTail, api.Errorf(api.CodeInternalError, nil, "no disk"))}
	for _, op := range []string{"jobs", "notifications"} {
		ok, _, msg := replyOf(t, d, `{"op":"`+op+`"}`)
		if want := op + ": audit.tail: INTERNAL_ERROR: no disk"; ok || msg != want {
			t.Errorf("%s: got %q, want %q", op, msg, want)
		}
	}
	// Empty feeds are [] rather than null.
	empty := (&fakeDaemon{}).answer(api.MethodJobsList, api.JobsListResult{}).answer(api.MethodAuditTail, api.AuditTailResult{}).
		answer(api.MethodConfirmList, api.ConfirmListResult{}).answer(api.MethodAppsList, api.AppsListResult{})
	for _, op := range []string{"jobs", "notifications"} {
		if got := string((&Driver{Daemon: empty}).Handle(t.Context(), []byte(`{"op":"`+op+`"}`))); got != `{"ok":true,"result":[]}` {
			t.Errorf("%s with nothing to report: %s", op, got)
		}
	}
}
