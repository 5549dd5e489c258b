package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// minLandlockABI is the first Landlock ABI that scopes abstract Unix
// sockets and signals (Linux 6.12).
const minLandlockABI = 6

// landlockSignalErratum is Landlock erratum 2, a fix to signal scoping
// (in the 6.12 stable series and later). Without it go-landlock treats
// the kernel as ABI 5 and RestrictScoped would refuse; agent run says so
// up front.
const landlockSignalErratum = 1 << 1

// sandboxSupport is what the running system offers the sandbox.
type sandboxSupport struct {
	bwrap        string // bwrap's path; "" when missing
	bwrapVersion string
	landlockABI  int // 0: no Landlock
	landlockErr  error
	errata       int
	// userns is why user namespaces are unusable; "" when they work.
	userns string
	// legacyTIOCSTI: the kernel lets a process push input into its
	// terminal, so the agent needs a session of its own.
	legacyTIOCSTI bool
}

// detectSandbox looks at the running system; version asks bwrap its
// version too (agent check), which costs a process.
func detectSandbox(version bool) sandboxSupport {
	var s sandboxSupport
	if p, err := exec.LookPath("bwrap"); err == nil {
		s.bwrap = p
		if version {
			if out, err := exec.Command(p, "--version").Output(); err == nil {
				s.bwrapVersion = strings.TrimSpace(string(out))
			}
		}
	}
	s.landlockABI, s.landlockErr = llsys.LandlockGetABIVersion()
	if s.landlockErr == nil {
		s.errata, _ = llsys.LandlockGetErrata()
	}
	s.userns = usernsProblem()
	tiocsti, err := os.ReadFile("/proc/sys/dev/tty/legacy_tiocsti")
	s.legacyTIOCSTI = err != nil || strings.TrimSpace(string(tiocsti)) != "0"
	return s
}

// usernsProblem says why bwrap could not make a user namespace, or "".
func usernsProblem() string {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	if read("/proc/sys/user/max_user_namespaces") == "0" {
		return "user namespaces are disabled (/proc/sys/user/max_user_namespaces is 0)"
	}
	if os.Getuid() != 0 {
		if read("/proc/sys/kernel/unprivileged_userns_clone") == "0" {
			return "unprivileged user namespaces are disabled (sysctl kernel.unprivileged_userns_clone=0)"
		}
		if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" {
			return "AppArmor restricts unprivileged user namespaces (sysctl kernel.apparmor_restrict_unprivileged_userns=1; allow bwrap in an AppArmor profile)"
		}
	}
	return ""
}

// problems lists what keeps the sandbox from being built.
func (s sandboxSupport) problems() []string {
	var p []string
	if s.bwrap == "" {
		p = append(p, "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)")
	}
	switch {
	case s.landlockErr != nil:
		p = append(p, fmt.Sprintf("Landlock is not available (%v; it needs Linux 6.12 or later with lsm=landlock)", s.landlockErr))
	case s.landlockABI < minLandlockABI:
		p = append(p, fmt.Sprintf("Landlock ABI %d cannot scope abstract Unix sockets and signals (ABI %d, Linux 6.12, needed)", s.landlockABI, minLandlockABI))
	case s.errata&landlockSignalErratum == 0:
		p = append(p, "this kernel's Landlock lacks the fix for signal scoping (erratum 2); update the kernel")
	}
	if s.userns != "" {
		p = append(p, s.userns)
	}
	return p
}

// report is agent check's text.
func (s sandboxSupport) report() string {
	var b strings.Builder
	if s.bwrap != "" {
		fmt.Fprintf(&b, "bubblewrap:      %s (%s)\n", s.bwrap, s.bwrapVersion)
	} else {
		b.WriteString("bubblewrap:      missing\n")
	}
	if s.landlockErr != nil {
		fmt.Fprintf(&b, "landlock:        unavailable (%v)\n", s.landlockErr)
	} else {
		fmt.Fprintf(&b, "landlock:        ABI %d, errata %#x\n", s.landlockABI, s.errata)
	}
	if s.userns != "" {
		fmt.Fprintf(&b, "user namespaces: %s\n", s.userns)
	} else {
		b.WriteString("user namespaces: available\n")
	}
	fmt.Fprintf(&b, "new session:     %v (legacy TIOCSTI %s)\n", s.legacyTIOCSTI, map[bool]string{true: "on", false: "off"}[s.legacyTIOCSTI])
	return b.String()
}

// restrictSelf scopes abstract Unix sockets and signals to this process's
// new Landlock domain, for it and what it execs. It fails, rather than
// doing less, on a kernel without ABI 6.
func restrictSelf() error {
	return landlock.V6.RestrictScoped()
}
