// Package abbuild builds a bench program against lockyard at another
// revision, for A/B runs against the parent of a change (bench/fair,
// bench/sem -base).
package abbuild

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// At builds the bench program pkg ("./fair", "./sem") against lockyard at
// revision rev (its root module from git archive, in a workspace with the
// bench module of this checkout; the adapters, which the bench module
// requires but the program does not import, from rev where it has them),
// and returns the binary and a cleanup. Run it from bench/.
func At(rev, pkg string) (string, func(), error) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", nil, fmt.Errorf("git rev-parse: %w", err)
	}
	root := strings.TrimSpace(string(top))
	dir, err := os.MkdirTemp("", "lockyard-base-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		cleanup()
		return "", nil, err
	}
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %q | tar -x -C %q", root, rev, src))
	if out, err := archive.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("git archive %s: %w: %s", rev, err, out)
	}
	// The bench programs are this checkout's, and use this checkout's
	// redistest (which imports nothing of the library): it replaces rev's,
	// which may be older or, before the test harnesses moved under
	// internal/testkit, missing.
	kit := filepath.Join(src, "internal", "testkit", "redistest")
	if err := os.RemoveAll(kit); err != nil {
		cleanup()
		return "", nil, err
	}
	if err := os.MkdirAll(filepath.Dir(kit), 0o755); err != nil {
		cleanup()
		return "", nil, err
	}
	cp := exec.Command("cp", "-r", filepath.Join(root, "internal", "testkit", "redistest"), kit)
	if out, err := cp.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("copying internal/testkit/redistest: %w: %s", err, out)
	}
	work := fmt.Sprintf(`go 1.26.0

use (
	%[1]q
	%[2]q
	%[3]q
	%[4]q
)

replace (
	github.com/lockyard/lockyard v0.1.0 => %[2]q
	github.com/lockyard/lockyard/goredis v0.1.0 => %[3]q
	github.com/lockyard/lockyard/rueidis v0.1.0 => %[4]q
)
`, filepath.Join(root, "bench"), src, adapterDir(root, src, "goredis"), adapterDir(root, src, "rueidis"))
	if err := os.WriteFile(filepath.Join(dir, "go.work"), []byte(work), 0o644); err != nil {
		cleanup()
		return "", nil, err
	}
	exe := filepath.Join(dir, "bench")
	cmd := exec.Command("go", "build", "-o", exe, pkg)
	cmd.Dir = filepath.Join(root, "bench")
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go build: %w: %s", err, out.String())
	}
	return exe, cleanup, nil
}

// adapterDir returns the adapter module's directory at rev, or in this
// checkout if rev has none.
func adapterDir(root, src, name string) string {
	if _, err := os.Stat(filepath.Join(src, name, "go.mod")); err == nil {
		return filepath.Join(src, name)
	}
	return filepath.Join(root, name)
}
