package dashboard

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/wireframe"
)

// The surfaces page: every surface the adapters report, its element tree
// as the wireframe, and, when the platform adapter serves
// system.capture, a screenshot with the elements' boxes drawn over it.

// captureCapability is the platform adapter's screenshot.
const captureCapability = "system.capture"

// maxSurfaces bounds the surfaces listed.
const maxSurfaces = 100

type surfacesView struct {
	Surfaces []api.Surface `json:"surfaces"`
	Focused  string        `json:"focused,omitempty"`
	// Capture says whether screenshots can be taken (the platform
	// adapter is on).
	Capture  bool     `json:"capture"`
	Problems []string `json:"problems,omitempty"`
}

func (s *Server) apiSurfaces(w http.ResponseWriter, r *http.Request, _ *session) {
	s.read(w, r, func(ctx context.Context) (any, error) {
		sc, err := s.b.SessionContext(ctx)
		if err != nil {
			return nil, err
		}
		out := &surfacesView{Surfaces: []api.Surface{}}
		if sc.FocusedSurface != nil {
			out.Focused = *sc.FocusedSurface
		}
		_, out.Capture = s.b.LookupCapability(captureCapability)
		for i, id := range sc.ActiveSurfaces {
			if i == maxSurfaces {
				break
			}
			sf, err := s.b.QuerySurface(ctx, &api.QuerySurfaceParams{SurfaceID: id})
			if err != nil {
				out.Problems = append(out.Problems, id+": "+err.Error())
				continue
			}
			out.Surfaces = append(out.Surfaces, *sf)
		}
		return out, nil
	})
}

// apiWireframe answers the surface's element tree as SVG.
func (s *Server) apiWireframe(w http.ResponseWriter, r *http.Request, _ *session) {
	ctx, sess := s.userContext(r.Context(), core.Endpoint{})
	defer sess.Close()
	res, err := s.b.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: r.URL.Query().Get("id")})
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(wireframe.SVG(&res.Root))
}

// shot is one screenshot kept for its page: the PNG, served once asked
// for by its key.
type shot struct {
	png []byte
}

// box is an element's rectangle on a screenshot, in the image's pixels.
type box struct {
	X     int    `json:"x"`
	Y     int    `json:"y"`
	W     int    `json:"w"`
	H     int    `json:"h"`
	Role  string `json:"role"`
	Label string `json:"label,omitempty"`
	ID    string `json:"id"`
}

type screenshotView struct {
	Image  string `json:"image"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	// Crop is the surface's own rectangle on the image (the screen's
	// capture holds more than the surface), nil when unknown.
	Crop  *api.Bounds `json:"crop,omitempty"`
	Boxes []box       `json:"boxes"`
}

// captureData is what the overlay needs of system.capture's answer.
type captureData struct {
	Width  int     `json:"width"`
	Height int     `json:"height"`
	Scale  float64 `json:"scale"`
	X      int     `json:"x"`
	Y      int     `json:"y"`
}

// apiScreenshot captures the surface (an X11 window itself, any other
// surface on the screen around it) as the user (the admin flag: no
// confirmation of one's own screenshot) and maps each element's bounds
// onto the image: surface coordinates, moved by the surface's place on
// the screen and the capture's origin, times the capture's scale.
func (s *Server) apiScreenshot(w http.ResponseWriter, r *http.Request, se *session) {
	id := r.URL.Query().Get("id")
	ctx, sess := s.userContext(r.Context(), core.Endpoint{})
	defer sess.Close()
	sf, err := s.b.QuerySurface(ctx, &api.QuerySurfaceParams{SurfaceID: id})
	if err != nil {
		writeError(w, err)
		return
	}
	params := map[string]any{"max_long_edge": 1600}
	if strings.HasPrefix(id, "x11:") {
		params["surface_id"] = id
	}
	raw, _ := json.Marshal(params)
	res, err := s.b.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: captureCapability, AppID: "system",
		Source: api.SourceSystemIntelligence, Params: raw, Admin: true})
	if err != nil {
		writeError(w, err)
		return
	}
	var cd captureData
	if err := json.Unmarshal(res.Data, &cd); err != nil || len(res.Attachments) == 0 {
		writeError(w, &api.Error{Code: api.CodeInternalError, Message: "system.capture answered no image"})
		return
	}
	view := &screenshotView{Width: cd.Width, Height: cd.Height, Boxes: []box{}}
	scale := cd.Scale
	if scale <= 0 {
		scale = 1
	}
	ox, oy := 0, 0
	if g := sf.Geometry; g != nil && g.W > 0 && g.H > 0 {
		ox, oy = g.X, g.Y
		x0, y0 := max(int(math.Round(float64(g.X-cd.X)*scale)), 0), max(int(math.Round(float64(g.Y-cd.Y)*scale)), 0)
		x1, y1 := min(int(math.Round(float64(g.X+g.W-cd.X)*scale)), cd.Width), min(int(math.Round(float64(g.Y+g.H-cd.Y)*scale)), cd.Height)
		if x1 > x0 && y1 > y0 {
			view.Crop = &api.Bounds{X: x0, Y: y0, W: x1 - x0, H: y1 - y0}
		}
	}
	if els, err := s.b.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: id}); err == nil {
		var walk func(el *api.Element)
		walk = func(el *api.Element) {
			if b := el.Bounds; b != nil && b.W > 0 && b.H > 0 && len(view.Boxes) < wireframe.MaxElements {
				bx := box{
					X: int(math.Round(float64(ox+b.X-cd.X) * scale)), Y: int(math.Round(float64(oy+b.Y-cd.Y) * scale)),
					W: int(math.Round(float64(b.W) * scale)), H: int(math.Round(float64(b.H) * scale)),
					Role: el.Role, Label: el.Label, ID: el.ID}
				// Hidden elements lie off the image (GTK puts them at
				// -2^31): not drawn.
				if bx.X < cd.Width && bx.X+bx.W > 0 && bx.Y < cd.Height && bx.Y+bx.H > 0 {
					view.Boxes = append(view.Boxes, bx)
				}
			}
			for i := range el.Children {
				walk(&el.Children[i])
			}
		}
		walk(&els.Root)
	}
	key := randomHex()[:32]
	s.mu.Lock()
	for k := range se.shots {
		if len(se.shots) < maxShots {
			break
		}
		delete(se.shots, k)
	}
	se.shots[key] = &shot{png: res.Attachments[0].Data}
	s.mu.Unlock()
	view.Image = "/api/shot/" + key
	writeJSON(w, http.StatusOK, view)
}

// apiShot serves a screenshot of the session's.
func (s *Server) apiShot(w http.ResponseWriter, r *http.Request, se *session) {
	s.mu.Lock()
	sh := se.shots[r.PathValue("key")]
	s.mu.Unlock()
	if sh == nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "private, max-age=3600")
	w.Write(sh.png)
}
