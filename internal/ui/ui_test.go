package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/ui"
)

// TestHandlerServesThePageAndItsFiles: the page at /, its script and style under /ui/, each with its type
// and the Content-Security-Policy that allows nothing but the origin's own files (no inline script or
// style); anything else is the mux's 404.
func TestHandlerServesThePageAndItsFiles(t *testing.T) {
	srv := httptest.NewServer(ui.Handler())
	defer srv.Close()
	for _, tc := range []struct{ path, contentType, contains string }{
		{"/", "text/html", `<script src="/ui/app.js"></script>`},
		{"/ui/app.js", "text/javascript", "POLL_MS"},
		{"/ui/style.css", "text/css", ".vertex"},
	} {
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.contentType) || !strings.Contains(string(body), tc.contains) {
			t.Errorf("GET %s: %d %q, want 200 %s with %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.contentType, tc.contains)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
	}
	for _, path := range []string{"/ui/missing.js", "/index.html", "/v1/jobs"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}
