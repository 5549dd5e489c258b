package golden

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// A transcript is the "transcript" section of a txtar archive: lines,
// each addressed to a named connection of the face under test.
//
//	NAME> TEXT      send TEXT on NAME
//	NAME< TEXT      NAME receives TEXT next
//	NAME! close     close NAME, and wait until the face has let go of it
//	NAME! closed    NAME reads end of file: the face has hung up
//	clock! advance D  move the test's clock by D (a Go duration)
//	# ...           a comment; any line that is none of these is text
//
// Consecutive "NAME<" lines of one connection form a block whose order
// is not fixed (JSON-RPC orders neither replies nor notifications, a
// framed reply races the events it caused): the block matches when
// NAME receives the same lines in any order. What TEXT means is the
// face's business (Conns); this file knows only the lines.

// Conns is the face under test as a transcript sees it: connections
// known by name, each opened at its first use. Play calls its methods
// from one goroutine, one at a time.
type Conns interface {
	// Send sends the TEXT of a "NAME> TEXT" line on NAME.
	Send(name, text string) error
	// Recv returns the next message NAME receives, written as the TEXT
	// of a "NAME< TEXT" line.
	Recv(name string) (string, error)
}

// Closer is what a Conns implements to serve "NAME! close" and
// "NAME! closed".
type Closer interface {
	// Close closes NAME and returns once the face has finished serving
	// it: the next line may depend on the face having let go.
	Close(name string) error
	// Closed returns nil when the face has hung up NAME (NAME reads end
	// of file), and closes NAME.
	Closed(name string) error
}

// Clock is the test clock "clock! advance D" moves.
type Clock interface{ Advance(time.Duration) }

// Script is how one face's golden test plays its transcripts.
type Script struct {
	Conns Conns
	// Clock serves "clock! advance D"; nil, the directive is unknown.
	Clock Clock
	// Ordered, when not nil, reports the connections whose lines are
	// compared one at a time in order instead of as blocks.
	Ordered func(name string) bool
	// Key, when not nil, is what a line NAME receives is compared by:
	// got and want match when their keys are equal (a frame is its
	// bytes, however a line writes it). An error is a want line that
	// does not parse.
	Key func(name, text string) (string, error)
}

// Play plays the archive's transcript on s: it sends what the
// transcript sends and compares what the face answers with what it
// expects. With -update it rewrites the transcript with what the face
// answered instead of failing on a difference.
func (a *Archive) Play(t *testing.T, s Script) {
	t.Helper()
	file := a.path
	var out bytes.Buffer
	lines := a.Lines("transcript")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		name, op, rest, ok := ParseLine(line)
		if !ok {
			out.WriteString(line + "\n")
			continue
		}
		switch op {
		case '>':
			if err := s.Conns.Send(name, rest); err != nil {
				t.Fatalf("%s:%d: %s: send: %v", file, i+1, name, err)
			}
			out.WriteString(line + "\n")
		case '<':
			want := []string{rest}
			for s.Ordered == nil || !s.Ordered(name) {
				if i+1 >= len(lines) {
					break
				}
				n2, op2, rest2, ok2 := ParseLine(lines[i+1])
				if !ok2 || n2 != name || op2 != '<' {
					break
				}
				want = append(want, rest2)
				i++
			}
			var got []string
			for range want {
				g, err := s.Conns.Recv(name)
				if err != nil {
					t.Errorf("%s:%d: %s: reading reply: %v (want %s)", file, i+1, name, err, want[len(got)])
					if !*Update {
						return
					}
					g = "?"
				}
				got = append(got, g)
			}
			same, err := s.sameLines(name, got, want)
			if err != nil && !*Update {
				t.Fatalf("%s:%d: %v", file, i+1, err)
			}
			if !same {
				if !*Update {
					t.Errorf("%s:%d: %s received\n got: %s\nwant: %s", file, i+1, name, strings.Join(got, "\n      "), strings.Join(want, "\n      "))
					return
				}
				want = got
			}
			for _, w := range want {
				out.WriteString(name + "< " + w + "\n")
			}
		case '!':
			if err := s.directive(name, rest); err != nil {
				t.Fatalf("%s:%d: %s: %v", file, i+1, name, err)
			}
			out.WriteString(line + "\n")
		}
	}
	if *Update {
		a.Save(t, "transcript", out.Bytes())
	}
}

// directive serves "NAME! rest".
func (s Script) directive(name, rest string) error {
	if name == "clock" {
		arg, ok := strings.CutPrefix(rest, "advance ")
		d, err := time.ParseDuration(arg)
		if s.Clock == nil || !ok || err != nil {
			return fmt.Errorf("clock directive %q, want 'advance DURATION'", rest)
		}
		s.Clock.Advance(d)
		return nil
	}
	c, ok := s.Conns.(Closer)
	switch {
	case ok && rest == "close":
		return c.Close(name)
	case ok && rest == "closed":
		return c.Closed(name)
	}
	return fmt.Errorf("unknown directive %q", rest)
}

// sameLines reports whether got and want hold the same lines, in any
// order, compared by s.Key. The error is a want line Key cannot read;
// then they are not the same.
func (s Script) sameLines(name string, got, want []string) (bool, error) {
	if len(got) != len(want) {
		return false, nil
	}
	a, b := slices.Clone(got), slices.Clone(want)
	if s.Key != nil {
		for i := range a {
			k, err := s.Key(name, a[i])
			if err != nil {
				// What the face sent and no line can write: no want
				// line matches it.
				k = "\x00" + a[i]
			}
			a[i] = k
		}
		for i := range b {
			k, err := s.Key(name, b[i])
			if err != nil {
				return false, err
			}
			b[i] = k
		}
	}
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b), nil
}

// ParseLine splits a transcript line "NAME> TEXT", "NAME< TEXT" or
// "NAME! TEXT" into its parts; ok is false for a comment or text.
func ParseLine(line string) (name string, op byte, rest string, ok bool) {
	if line == "" || line[0] == '#' {
		return "", 0, "", false
	}
	i := strings.IndexAny(line, "<>!")
	if i <= 0 || i+1 >= len(line) || line[i+1] != ' ' {
		return "", 0, "", false
	}
	return line[:i], line[i], line[i+2:], true
}
