package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"net/http"
	"path"
)

// static holds the pages' script, style sheet and shell, served from the
// binary: no CDN, no build step.
//
//go:embed static
var static embed.FS

// pageNames are the dashboard's pages, in the order of its navigation.
var pageNames = []string{"confirmations", "jobs", "events", "audit", "apps", "surfaces"}

var pageTitles = map[string]string{
	"confirmations": "Confirmations", "jobs": "Jobs", "events": "Events",
	"audit": "Audit log", "apps": "Apps & capabilities", "surfaces": "Surfaces",
}

// pageSet is the parsed shell and the static files with their hashes.
type pageSet struct {
	shell *template.Template
	// files are the static files by name; versions their content hash,
	// which the shell puts in their URLs so they can be cached for good.
	files        map[string][]byte
	versions     map[string]string
	loginRefused []byte
}

type navItem struct {
	Name, Title string
	Current     bool
}

type shellData struct {
	Page, Title, CSRF string
	Nav               []navItem
	Script, Style     string
}

func newPageSet() *pageSet {
	ps := &pageSet{files: map[string][]byte{}, versions: map[string]string{}}
	for _, name := range []string{"app.js", "style.css"} {
		b, err := static.ReadFile("static/" + name)
		if err != nil {
			panic("dashboard: embedded " + name + ": " + err.Error())
		}
		sum := sha256.Sum256(b)
		ps.files[name] = b
		ps.versions[name] = hex.EncodeToString(sum[:8])
	}
	ps.shell = template.Must(template.ParseFS(static, "static/shell.html"))
	lr, err := static.ReadFile("static/login.html")
	if err != nil {
		panic("dashboard: embedded login.html: " + err.Error())
	}
	ps.loginRefused = bytes.ReplaceAll(lr, []byte("{{style}}"), []byte("/static/style.css?v="+ps.versions["style.css"]))
	return ps
}

// page serves one page's shell; its script fills it in and keeps it live.
func (s *Server) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se := s.session(r)
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if se == nil {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write(s.pages.loginRefused)
			return
		}
		d := shellData{Page: name, Title: pageTitles[name], CSRF: se.csrf,
			Script: "/static/app.js?v=" + s.pages.versions["app.js"], Style: "/static/style.css?v=" + s.pages.versions["style.css"]}
		for _, p := range pageNames {
			d.Nav = append(d.Nav, navItem{Name: p, Title: pageTitles[p], Current: p == name})
		}
		var buf bytes.Buffer
		if err := s.pages.shell.Execute(&buf, &d); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write(buf.Bytes())
	}
}

// serveStatic serves an embedded file; with its version in the URL it
// never changes, so the browser keeps it.
func (s *Server) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, ok := s.pages.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	switch path.Ext(name) {
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	}
	if r.URL.Query().Get("v") == s.pages.versions[name] {
		w.Header().Set("Cache-Control", "max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	w.Write(b)
}
