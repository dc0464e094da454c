// Command githttp serves every Git repository under a directory over the
// smart HTTP protocol, which go-git (and so Flux source-controller) requires:
// it wraps git's own git-http-backend in net/http/cgi.
//
// Usage: githttp 127.0.0.1:PORT /path/to/repos
package main

import (
	"fmt"
	"log"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: githttp 127.0.0.1:PORT REPO_ROOT")
		os.Exit(2)
	}
	addr, root := os.Args[1], os.Args[2]
	root, err := filepath.Abs(root)
	if err != nil {
		log.Fatal(err)
	}
	backend, err := gitHTTPBackend()
	if err != nil {
		log.Fatal(err)
	}
	handler := &cgi.Handler{
		Path: backend,
		Env: []string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
		},
	}
	log.Printf("serving %s on http://%s/", root, addr)
	log.Fatal(http.ListenAndServe(addr, handler))
}

// gitHTTPBackend finds git-http-backend in git's exec path.
func gitHTTPBackend() (string, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return "", fmt.Errorf("git --exec-path: %w", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("git-http-backend: %w", err)
	}
	return path, nil
}
