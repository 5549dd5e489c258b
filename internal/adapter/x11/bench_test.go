package x11

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"
)

// Benchmarks, each beside its peer in the same run:
//
//	BenchmarkCapture/{1280x1024,1920x1080}/{pcp,pcp-scaled,import,xwd}
//	    a capture of the whole screen: PCP's PNG (MIT-SHM, pngenc.go)
//	    against ImageMagick's `import -window root png:-` (PNG) and
//	    `xwd -root -silent` (raw XWD, no encoding). The 1920x1080 screen
//	    is a second Xvfb whose root shows the test desktop's screen.
//	BenchmarkType/{pcp,xdotool,xdotool-delay0}
//	    200 characters typed into xterm running cat, until the line
//	    arrived in cat's file, against `xdotool type` (its default 12 ms
//	    between keys, and --delay 0).
//	BenchmarkClick/{pcp,xdotool}
//	    one click, until the server has processed it, against
//	    `xdotool click 1`.

func BenchmarkCapture(b *testing.B) {
	src := open(b)
	screens := []struct {
		name    string
		display string
		c       *Conn
	}{{"1280x1024", desk.Vars["DISPLAY"], src}}
	big := startXvfb(b, "1920x1080x24")
	bc := open2(b, big)
	paintRoot(b, src, bc)
	screens = append(screens, struct {
		name    string
		display string
		c       *Conn
	}{"1920x1080", big, bc})
	for _, sc := range screens {
		b.Run(sc.name+"/pcp", func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for i := 0; i < b.N; i++ {
				shot, err := sc.c.Capture(context.Background(), 0, CaptureOptions{NoScale: true})
				if err != nil {
					b.Fatal(err)
				}
				n = len(shot.PNG)
			}
			b.ReportMetric(float64(n), "png-bytes")
		})
		b.Run(sc.name+"/pcp-scaled", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := sc.c.Capture(context.Background(), 0, CaptureOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(sc.name+"/import", func(b *testing.B) {
			var n int
			for i := 0; i < b.N; i++ {
				n = runPeer(b, sc.display, "import", "-window", "root", "png:-")
			}
			b.ReportMetric(float64(n), "png-bytes")
		})
		b.Run(sc.name+"/xwd", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				runPeer(b, sc.display, "xwd", "-root", "-silent")
			}
		})
	}
}

// runPeer runs a peer tool on display and returns its output's size.
func runPeer(b *testing.B, display string, name string, args ...string) int {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+display)
	out, err := cmd.Output()
	if err != nil || len(out) == 0 {
		b.Fatalf("%s: %v (%d bytes)", name, err, len(out))
	}
	return len(out)
}

func open2(b testing.TB, display string) *Conn {
	c, err := Open(display, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// startXvfb starts an Xvfb with one screen of the given geometry and
// returns its display.
func startXvfb(b testing.TB, screen string) string {
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", screen, "-nolisten", "tcp")
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	w.Close()
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(r).ReadString('\n')
	r.Close()
	if err != nil {
		b.Fatalf("Xvfb %s: no display: %v", screen, err)
	}
	return ":" + strings.TrimSpace(line)
}

// paintRoot makes dst's root background a tiling of src's screen, so the
// capture benchmarks encode a desktop, not a black screen.
func paintRoot(b *testing.B, src, dst *Conn) {
	img, _, err := src.CaptureImage(context.Background(), 0, CaptureOptions{NoScale: true})
	if err != nil {
		b.Fatal(err)
	}
	pm, err := xproto.NewPixmapId(dst.xc)
	if err != nil {
		b.Fatal(err)
	}
	xproto.CreatePixmap(dst.xc, dst.depth, pm, xproto.Drawable(dst.root), uint16(dst.width), uint16(dst.height))
	gc, err := xproto.NewGcontextId(dst.xc)
	if err != nil {
		b.Fatal(err)
	}
	xproto.CreateGC(dst.xc, gc, xproto.Drawable(pm), 0, nil)
	sw, sh := img.Rect.Dx(), img.Rect.Dy()
	const rows = 32 // 32 rows of 1920 pixels: 240 KiB, under the request limit
	buf := make([]byte, dst.width*rows*4)
	for y0 := 0; y0 < dst.height; y0 += rows {
		n := min(rows, dst.height-y0)
		for y := 0; y < n; y++ {
			for x := 0; x < dst.width; x++ {
				s := img.Pix[((y0+y)%sh)*img.Stride+(x%sw)*4:]
				d := buf[(y*dst.width+x)*4:]
				d[0], d[1], d[2], d[3] = s[2], s[1], s[0], 0
			}
		}
		if err := xproto.PutImageChecked(dst.xc, xproto.ImageFormatZPixmap, xproto.Drawable(pm), gc, uint16(dst.width), uint16(n), 0, int16(y0), 0, dst.depth, buf[:dst.width*n*4]).Check(); err != nil {
			b.Fatal(err)
		}
	}
	xproto.ChangeWindowAttributes(dst.xc, dst.root, xproto.CwBackPixmap, []uint32{uint32(pm)})
	xproto.ClearArea(dst.xc, false, dst.root, 0, 0, 0, 0)
	if err := dst.sync(); err != nil {
		b.Fatal(err)
	}
}

// typeText is what the typing benchmark types: 200 characters.
var typeText = strings.Repeat("The quick brown fox, 42 jumps! ", 7)[:200]

func BenchmarkType(b *testing.B) {
	c := open(b)
	ctx := context.Background()
	file := filepath.Join(b.TempDir(), "typed")
	s, _ := startXterm(b, c, "pcp-bench-type", "exec cat > "+file)
	if err := c.Focus(ctx, s.Window, 5*time.Second); err != nil {
		b.Fatal(err)
	}
	typed := 0
	// arrived waits for the i-th line in cat's file.
	arrived := func(b *testing.B) {
		typed++
		want := strings.Repeat(typeText+"\n", typed)
		waitFile(b, file, func(s string) bool { return len(s) >= len(want) })
		if got, _ := os.ReadFile(file); string(got) != want {
			b.Fatalf("typed text: got %q, want %q", got[max(0, len(got)-220):], typeText)
		}
	}
	b.Run("pcp", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := c.Type(ctx, typeText+"\n"); err != nil {
				b.Fatal(err)
			}
			arrived(b)
		}
	})
	for _, peer := range []struct {
		name string
		args []string
	}{{"xdotool", nil}, {"xdotool-delay0", []string{"--delay", "0"}}} {
		b.Run(peer.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				args := append(append([]string{"type"}, peer.args...), typeText+"\n")
				cmd := exec.Command("xdotool", args...)
				cmd.Env = append(os.Environ(), desk.Env...)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("xdotool: %v\n%s", err, out)
				}
				arrived(b)
			}
		})
	}
}

func BenchmarkClick(b *testing.B) {
	c := open(b)
	ctx := context.Background()
	// Clicks on the root window's empty corner: nothing reacts.
	x, y := c.width-2, c.height-2
	b.Run("pcp", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := c.Click(ctx, x, y, ButtonLeft, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("xdotool", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cmd := exec.Command("xdotool", "mousemove", fmt.Sprint(x), fmt.Sprint(y), "click", "1")
			cmd.Env = append(os.Environ(), desk.Env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("xdotool: %v\n%s", err, out)
			}
		}
	})
}
