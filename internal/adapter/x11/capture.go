package x11

import (
	"context"
	"image"
	"math"

	"github.com/jezek/xgb/shm"
	"github.com/jezek/xgb/xproto"
	"golang.org/x/sys/unix"
)

// Capture defaults: a model's image limits.
const (
	DefaultMaxLongEdge = 1568
	DefaultMaxPixels   = 1_150_000
)

// CaptureOptions say how large a capture may be. Zero values take the
// defaults.
type CaptureOptions struct {
	// MaxLongEdge bounds the image's longer side, in pixels.
	MaxLongEdge int
	// MaxPixels bounds width × height.
	MaxPixels int
	// NoScale keeps the screen's own size whatever the limits.
	NoScale bool
}

// Shot is one capture, PNG-encoded.
type Shot struct {
	// PNG is the encoded image. The caller owns it.
	PNG []byte
	// Width and Height are the image's size.
	Width, Height int
	// X, Y, SourceWidth, SourceHeight are the captured rectangle in root
	// coordinates.
	X, Y, SourceWidth, SourceHeight int
	// Scale is the image's size over the captured rectangle's (≤ 1): a
	// point (px, py) of the image is (X + px/Scale, Y + py/Scale) on the
	// screen.
	Scale float64
	// SHM says the pixels were read through MIT-SHM.
	SHM bool
}

// shmSeg is the connection's shared-memory segment for captures, sized
// for the whole screen; guarded by captureMu.
type shmSeg struct {
	seg  shm.Seg
	mem  []byte
	dead bool // attaching failed: GetImage from now on
}

// Capture captures window w (0: the whole screen) and encodes it as PNG,
// scaled to opts' limits. A window that is minimized, unmapped or off the
// screen is CAPTURE_FAILED, with the reason.
func (c *Conn) Capture(ctx context.Context, w uint32, opts CaptureOptions) (*Shot, error) {
	img, shot, err := c.CaptureImage(ctx, w, opts)
	if err != nil {
		return nil, err
	}
	raw, err := encodePNG(img)
	if err != nil {
		return nil, captureFailed("encode_failed", nil, "encoding the capture: %v", err)
	}
	shot.PNG = raw
	return shot, nil
}

// CaptureImage is Capture without the encoding: the scaled pixels.
func (c *Conn) CaptureImage(ctx context.Context, w uint32, opts CaptureOptions) (*image.RGBA, *Shot, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, nil, err
	}
	x, y, wd, ht := 0, 0, c.width, c.height
	if w != 0 && xproto.Window(w) != c.root {
		s, err := c.Surface(ctx, w)
		if err != nil {
			return nil, nil, err
		}
		data := map[string]any{"surface_id": SurfaceID(w)}
		switch {
		case s.Minimized:
			return nil, nil, captureFailed("minimized", data, "surface %s is minimized", SurfaceID(w))
		case !s.Mapped:
			return nil, nil, captureFailed("unmapped", data, "surface %s is not mapped", SurfaceID(w))
		}
		// The window's part on the screen.
		x0, y0 := max(s.X, 0), max(s.Y, 0)
		x1, y1 := min(s.X+s.Width, c.width), min(s.Y+s.Height, c.height)
		if x1 <= x0 || y1 <= y0 {
			return nil, nil, captureFailed("off_screen", data, "surface %s is outside the screen", SurfaceID(w))
		}
		x, y, wd, ht = x0, y0, x1-x0, y1-y0
	}
	pix, usedShm, err := c.grab(x, y, wd, ht)
	if err != nil {
		return nil, nil, err
	}
	dw, dh, scale := fit(wd, ht, opts)
	img := image.NewRGBA(image.Rect(0, 0, dw, dh))
	if dw == wd && dh == ht {
		bgrxToRGBA(img.Pix, pix[:wd*ht*4])
	} else {
		boxScale(img.Pix, dw, dh, pix[:wd*ht*4], wd, ht)
	}
	return img, &Shot{Width: dw, Height: dh, X: x, Y: y, SourceWidth: wd, SourceHeight: ht, Scale: scale, SHM: usedShm}, nil
}

// fit returns the size a w×h capture is scaled to and the scale factor.
func fit(w, h int, o CaptureOptions) (int, int, float64) {
	if o.NoScale {
		return w, h, 1
	}
	edge, area := o.MaxLongEdge, o.MaxPixels
	if edge <= 0 {
		edge = DefaultMaxLongEdge
	}
	if area <= 0 {
		area = DefaultMaxPixels
	}
	s := 1.0
	if long := max(w, h); long > edge {
		s = float64(edge) / float64(long)
	}
	if px := float64(w) * float64(h) * s * s; px > float64(area) {
		s *= math.Sqrt(float64(area) / px)
	}
	if s >= 1 {
		return w, h, 1
	}
	dw, dh := max(int(float64(w)*s), 1), max(int(float64(h)*s), 1)
	return dw, dh, float64(dw) / float64(w)
}

// grab reads the rectangle's pixels as 32-bit BGRX, row after row.
func (c *Conn) grab(x, y, w, h int) ([]byte, bool, error) {
	if c.depth != 24 && c.depth != 32 {
		return nil, false, captureFailed("unsupported_depth", map[string]any{"depth": c.depth}, "the screen's depth is %d; 24 and 32 are supported", c.depth)
	}
	c.captureMu.Lock()
	defer c.captureMu.Unlock()
	if c.hasShm && !c.seg.dead {
		if c.seg.mem == nil {
			if err := c.attachShmLocked(); err != nil {
				c.log.Info("x11: MIT-SHM unavailable; captures use GetImage", "err", err)
				c.seg.dead = true
			}
		}
		if c.seg.mem != nil {
			_, err := shm.GetImage(c.xc, xproto.Drawable(c.root), int16(x), int16(y), uint16(w), uint16(h), 0xffffffff,
				xproto.ImageFormatZPixmap, c.seg.seg, 0).Reply()
			if err != nil {
				return nil, false, captureFailed("get_image_failed", nil, "MIT-SHM GetImage: %v", err)
			}
			// The caller converts before the next capture reuses it.
			return c.seg.mem[:w*h*4], true, nil
		}
	}
	r, err := xproto.GetImage(c.xc, xproto.ImageFormatZPixmap, xproto.Drawable(c.root), int16(x), int16(y), uint16(w), uint16(h), 0xffffffff).Reply()
	if err != nil {
		return nil, false, captureFailed("get_image_failed", nil, "GetImage: %v", err)
	}
	if len(r.Data) < w*h*4 {
		return nil, false, captureFailed("short_image", map[string]any{"bytes": len(r.Data)}, "GetImage returned %d bytes for %dx%d", len(r.Data), w, h)
	}
	return r.Data, false, nil
}

// attachShmLocked makes a System V segment for the whole screen and
// attaches it to the server. It is marked for removal at once, so it goes
// away with the last detach even if this process dies.
func (c *Conn) attachShmLocked() error {
	size := c.width * c.height * 4
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, size, unix.IPC_CREAT|0o600)
	if err != nil {
		return err
	}
	mem, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		unix.SysvShmCtl(id, unix.IPC_RMID, nil)
		return err
	}
	seg, err := shm.NewSegId(c.xc)
	if err == nil {
		err = shm.AttachChecked(c.xc, seg, uint32(id), false).Check()
	}
	unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	if err != nil {
		unix.SysvShmDetach(mem)
		return err
	}
	c.seg.seg, c.seg.mem = seg, mem
	return nil
}

// detachShm releases the segment (Close).
func (c *Conn) detachShm() {
	c.captureMu.Lock()
	defer c.captureMu.Unlock()
	if c.seg.mem != nil {
		shm.Detach(c.xc, c.seg.seg)
		c.sync()
		unix.SysvShmDetach(c.seg.mem)
		c.seg.mem = nil
	}
}

// bgrxToRGBA converts 32-bit BGRX pixels to opaque RGBA.
func bgrxToRGBA(dst, src []byte) {
	for i := 0; i+3 < len(src) && i+3 < len(dst); i += 4 {
		dst[i], dst[i+1], dst[i+2], dst[i+3] = src[i+2], src[i+1], src[i], 0xff
	}
}

// boxScale shrinks a sw×sh BGRX image into a dw×dh RGBA one, each
// destination pixel the mean of the source pixels it covers.
func boxScale(dst []byte, dw, dh int, src []byte, sw, sh int) {
	xs := make([]int, dw+1)
	for i := range xs {
		xs[i] = i * sw / dw
	}
	sums := make([]uint32, dw*3)
	for dy := 0; dy < dh; dy++ {
		y0, y1 := dy*sh/dh, (dy+1)*sh/dh
		if y1 <= y0 {
			y1 = y0 + 1
		}
		clear(sums)
		for y := y0; y < y1; y++ {
			row := src[y*sw*4 : (y+1)*sw*4]
			for dx := 0; dx < dw; dx++ {
				x0, x1 := xs[dx], xs[dx+1]
				if x1 <= x0 {
					x1 = x0 + 1
				}
				var b, g, r uint32
				for x := x0; x < x1; x++ {
					p := row[x*4 : x*4+3]
					b += uint32(p[0])
					g += uint32(p[1])
					r += uint32(p[2])
				}
				s := sums[dx*3 : dx*3+3]
				s[0] += r
				s[1] += g
				s[2] += b
			}
		}
		out := dst[dy*dw*4 : (dy+1)*dw*4]
		for dx := 0; dx < dw; dx++ {
			x0, x1 := xs[dx], xs[dx+1]
			if x1 <= x0 {
				x1 = x0 + 1
			}
			n := uint32((x1 - x0) * (y1 - y0))
			s := sums[dx*3 : dx*3+3]
			o := out[dx*4 : dx*4+4]
			o[0], o[1], o[2], o[3] = byte(s[0]/n), byte(s[1]/n), byte(s[2]/n), 0xff
		}
	}
}
