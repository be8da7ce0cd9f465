// Package ui serves Runnel's web dashboard: static files embedded in the binary (an HTML page, its script
// and style sheet) that read everything they show from the REST API of the same address (docs/ui.md).
//
// It owns the files and how they are served, and nothing else: it knows no job, reads no state and imports
// no Runnel package. Whoever serves the REST API (the JobManager, or a run's mini-cluster with --ui)
// mounts Handler beside it, behind the same TLS.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Handler serves the dashboard: GET / is its page, /ui/FILE its other files. The page is one document
// whose script routes by the URL's fragment (#/jobs/ID), so no other path needs to reach it.
func Handler() http.Handler {
	files, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree always has assets/
	}
	static := http.StripPrefix("/ui/", http.FileServerFS(files))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		secure(w)
		http.ServeFileFS(w, r, files, "index.html")
	})
	mux.HandleFunc("GET /ui/", func(w http.ResponseWriter, r *http.Request) {
		secure(w)
		static.ServeHTTP(w, r)
	})
	return mux
}

// secure sets the headers every file of the dashboard is served with: its own files and the API of its
// origin are all it loads, and no other site may frame it.
func secure(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
}
