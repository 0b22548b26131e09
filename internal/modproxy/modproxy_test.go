package modproxy

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rootPath is the root module's path; the submodules' paths are below it.
const rootPath = "github.com/d3b93e30/redlock"

// userModules are the modules a user installs, by folder ("" the root),
// each with an identifier the outside program uses. The etcd comparison and
// the benchmarks are for this repository only.
var userModules = []struct{ dir, use string }{
	{"", "redlock.Dial"},
	{"redlockotel", "redlockotel.New"},
	{"redlockgocron", "redlockgocron.NewLocker"},
	{"pgfence", "pgfence.NewStore"},
}

// submoduleVersion is the version the test gives each submodule (the first
// tag of each, redlockotel/v0.1.0 and so on).
const submoduleVersion = "v0.1.0"

var requireRoot = regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(rootPath) + `\s+(v\S+)`)

// rootVersion returns the version of the root module that every user
// submodule requires, and fails if they differ, require none, or replace
// it (a replace directive works inside the repository only).
func rootVersion(t *testing.T, repo string) string {
	t.Helper()
	version := ""
	for _, m := range userModules[1:] {
		mod, err := os.ReadFile(filepath.Join(repo, m.dir, "go.mod"))
		require.NoError(t, err)
		require.NotRegexp(t, `(?m)^\s*replace\b.*`+regexp.QuoteMeta(rootPath)+`\s`, string(mod), "%s/go.mod replaces the root module: a user's go get cannot follow it", m.dir)
		got := requireRoot.FindStringSubmatch(string(mod))
		require.NotNil(t, got, "%s/go.mod requires the root module", m.dir)
		if version == "" {
			version = got[1]
		}
		require.Equal(t, version, got[1], "%s/go.mod requires the root module at the version the others do", m.dir)
	}
	require.Regexp(t, `^v\d+\.\d+\.\d+$`, version, "a released version, not a pseudo-version or v0.0.0")
	require.NotEqual(t, "v0.0.0", version)
	return version
}

// fileName matches the file and folder names a module zip may hold (the
// module zip rules allow more; this is what the repository uses).
var fileName = regexp.MustCompile(`^[A-Za-z0-9_.+~-]*[A-Za-z0-9_+~-]$`)

// zipModule writes the module in dir, as path@version, in the layout a
// module proxy serves: list, .info, .mod and .zip under proxy/path/@v. The
// zip holds the module's regular files under "path@version/", without
// version-control folders and without the folders of other modules (those
// holding a go.mod), as the go command's module zips do.
func zipModule(t *testing.T, proxy, dir, path, version string) {
	t.Helper()
	at := filepath.Join(proxy, filepath.FromSlash(path), "@v")
	require.NoError(t, os.MkdirAll(at, 0o755))
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".hg", ".svn", ".bzr", "vendor":
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		if !fileName.MatchString(d.Name()) {
			return fmt.Errorf("%s: a name the module zip rules may refuse", rel)
		}
		if !d.Type().IsRegular() {
			return nil // folders are implied; symbolic links are left out
		}
		w, err := zw.Create(path + "@" + version + "/" + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	for name, b := range map[string][]byte{
		"list": []byte(version + "\n"), version + ".info": info, version + ".mod": mod, version + ".zip": buf.Bytes(),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(at, name), b, 0o644))
	}
}

// goEnv returns `go env NAME`.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// A user's program gets the library and each user-facing submodule with go
// get, at tagged versions, from a module proxy: every submodule requires a
// released version of the root module and replaces nothing. Our modules
// come from a file proxy made from the working tree (the root at the
// version the submodules require, as if tagged); third-party modules from
// the local module cache or, missing there, the default proxy. Before, the
// submodules required the root at v0.0.0 with a replace directive, which a
// user's go get cannot follow.
func TestModules_InstallWithGoGet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an outside program: not with -short")
	}
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	root, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(root), "module "+rootPath+"\n")
	version := rootVersion(t, repo)
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	require.NoError(t, err)
	for _, m := range userModules {
		path := strings.TrimSuffix(rootPath+"/"+m.dir, "/")
		require.Contains(t, string(readme), "go get "+path+"@", "README's Install section gives the go get line")
	}

	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	var get []string
	var imports, uses strings.Builder
	for _, m := range userModules {
		path, v := rootPath, version
		if m.dir != "" {
			path, v = rootPath+"/"+m.dir, submoduleVersion
		}
		zipModule(t, proxy, filepath.Join(repo, m.dir), path, v)
		get = append(get, path+"@"+v)
		fmt.Fprintf(&imports, "\t%q\n", path)
		fmt.Fprintf(&uses, "\t_ = %s\n", m.use)
	}

	user := filepath.Join(tmp, "consumer")
	require.NoError(t, os.MkdirAll(user, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(user, "go.mod"), []byte("module example.com/consumer\n\ngo 1.26.0\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(user, "main.go"), []byte(
		"package main\n\nimport (\n"+imports.String()+")\n\nfunc main() {\n"+uses.String()+"}\n"), 0o644))

	// Our modules first, from the file proxy; then the module cache's
	// download folder (a proxy layout too), then the usual proxy.
	proxies := "file://" + filepath.ToSlash(proxy) + ",file://" + filepath.ToSlash(filepath.Join(goEnv(t, "GOMODCACHE"), "cache", "download"))
	if p := goEnv(t, "GOPROXY"); p != "" && p != "off" {
		proxies += "," + p
	}
	env := append(os.Environ(),
		"GOWORK=off",                   // a user has no go.work of ours
		"GOFLAGS=-mod=mod -modcacherw", // a module cache the test can remove
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOPROXY="+proxies,
		"GOSUMDB=off", "GONOSUMDB="+rootPath, "GOPRIVATE=", "GONOPROXY=", // no checksum database is asked; our modules are not published
		"GOTOOLCHAIN=local",
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = user, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	run(append([]string{"get"}, get...)...)
	// -trimpath: the build cache serves the third-party packages from run
	// to run, wherever the module cache is.
	run("build", "-trimpath", "-o", filepath.Join(tmp, "consumer.bin"), ".")

	// The build used our modules at the versions asked, from the file proxy.
	listed := run("list", "-m", "-f", "{{.Path}} {{.Version}} {{.Dir}}", "all")
	for _, g := range get {
		path, v, _ := strings.Cut(g, "@")
		require.Regexp(t, "(?m)^"+regexp.QuoteMeta(path+" "+v+" "+filepath.Join(tmp, "modcache"))+`\S*$`, listed)
	}
}
