//go:build !leanclient

package main

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
	"time"
)

// The scaffold's files, rendered with newData.
//
//go:embed scaffold/*.tmpl scaffold/js/*.tmpl
var scaffoldFS embed.FS

// selfModule is this repository's module path: a capsule created inside
// it builds against the checkout with no go.mod of its own.
const selfModule = "github.com/capsule-host/capsule-host"

// capsuleNameRule is host/manifest's rule for [capsule] name, named in
// the refusal; the scaffold's own validate (TestNewScaffoldBuilds) would
// fail if the two drifted.
var capsuleNameRule = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func init() {
	commands = append(commands, &command{
		name: "new", args: "NAME [DIR]", summary: "scaffold a Go (or --lang js) capsule that builds, validates and passes its test at once", minArgs: 1, maxArgs: 2,
		help: `Creates DIR (default ./NAME), which must not exist, holding a Go capsule:
Capsule.toml, main.go (a greet tool and a persistent-process example),
main_test.go (loads the capsule in an in-process host and calls its
tools: go test ./...) and build.sh (compiles NAME.wasm reproducibly and
runs capsule-host pin). NAME is the capsule's name: lowercase letters,
digits and '-', starting with a letter or digit, at most 63 characters.

Inside a checkout of capsule-host the capsule builds with the checkout's
go.mod. Anywhere else the SDK is not fetchable (it is not published):
new writes a go.mod whose replace directive points at a checkout (--sdk,
default $CAPSULE_HOST_SDK) and runs go mod tidy there.

Then: ./build.sh && capsule-host validate DIR && (cd DIR && go test ./...).

--lang js writes a JavaScript (componentize-js) capsule instead: capsule.js
(a greet tool), build.mjs and build.sh (npm ci of the pinned
package-lock.json, capsule-host wit --out, componentize, pin), and the
same main_test.go loop; build.sh needs node and npm.`,
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.StringVar(&o.sdk, "sdk", "", "capsule-host checkout `dir` for the replace directive (outside a checkout; default $CAPSULE_HOST_SDK)")
			fs.StringVar(&o.lang, "lang", "go", "the capsule's `language`: go or js (componentize-js; build.sh needs node and npm)")
			fs.StringVar(&o.module, "module", "", "Go module `path` of the new capsule outside a checkout (default example.com/NAME)")
		},
		run: runNew,
	})
}

// newData fills the templates.
type newData struct {
	Name   string
	Module string
	SDK    string
}

// ErrUnknownLang is new's refusal of a --lang it has no template for.
var ErrUnknownLang = errors.New("unknown --lang")

// scaffoldLangs maps each --lang to its template directory.
var scaffoldLangs = map[string]string{"go": "scaffold", "js": "scaffold/js"}

func runNew(e *env, o *opts, args []string) error {
	name := args[0]
	tmplDir, ok := scaffoldLangs[pick(o.lang, "go")]
	if !ok {
		err := fmt.Errorf("%w %q: the choices are go, js", ErrUnknownLang, o.lang)
		return &usageError{msg: err.Error(), err: err}
	}
	if !capsuleNameRule.MatchString(name) {
		return usagef("invalid capsule name %q: a name is 1 to 63 lowercase letters, digits and '-', starting with a letter or digit (%s)", name, capsuleNameRule)
	}
	dir := name
	if len(args) == 2 {
		dir = args[1]
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(abs); err == nil {
		return fmt.Errorf("%s already exists: new writes into a new directory only", dir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	d := newData{Name: name}
	inRepo, err := insideSelf(filepath.Dir(abs))
	if err != nil {
		return err
	}
	if !inRepo {
		if d.SDK, err = sdkCheckout(o.sdk); err != nil {
			return err
		}
		d.Module = pick(o.module, "example.com/"+name)
	}
	if err := writeScaffold(abs, tmplDir, d, !inRepo); err != nil {
		os.RemoveAll(abs)
		return err
	}
	if !inRepo {
		if err := goModTidy(e.ctx, abs); err != nil {
			return fmt.Errorf("%w\nthe capsule is in %s; fix the above and run: (cd %s && go mod tidy)", err, dir, shellQuote(dir))
		}
	}
	fmt.Fprintf(e.stdout, "created %s (capsule %s)\nnext: %s/build.sh && capsule-host validate %s && (cd %s && go test ./...)\n",
		dir, name, shellQuote(dir), shellQuote(dir), shellQuote(dir))
	return nil
}

// writeScaffold creates dir and renders every template into it (go.mod
// only when withMod).
func writeScaffold(dir, tmplDir string, d newData, withMod bool) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err // a directory created meanwhile is refused here too
	}
	ents, err := scaffoldFS.ReadDir(tmplDir)
	if err != nil {
		return err
	}
	for _, ent := range ents {
		if ent.IsDir() {
			continue
		}
		out := strings.TrimSuffix(ent.Name(), ".tmpl")
		if out == "go.mod" && !withMod {
			continue
		}
		t, err := template.ParseFS(scaffoldFS, tmplDir+"/"+ent.Name())
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if err := t.Execute(&b, d); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(out, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, out), b.Bytes(), mode); err != nil {
			return err
		}
	}
	return nil
}

// insideSelf reports whether dir lies in this repository's module: the
// nearest go.mod above it declares selfModule.
func insideSelf(dir string) (bool, error) {
	for d := dir; ; d = filepath.Dir(d) {
		f, err := os.Open(filepath.Join(d, "go.mod"))
		if err == nil {
			defer f.Close()
			return modulePath(f) == selfModule, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		if filepath.Dir(d) == d {
			return false, nil
		}
	}
}

// modulePath is the path of a go.mod's module directive.
func modulePath(f *os.File) string {
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// sdkCheckout is the checkout the replace directive names: it must hold
// this module's go.mod and the SDK.
func sdkCheckout(flagged string) (string, error) {
	dir := pick(flagged, os.Getenv("CAPSULE_HOST_SDK"))
	if dir == "" {
		return "", usagef("outside a capsule-host checkout the SDK comes from a local checkout (it is not published): pass --sdk DIR or set $CAPSULE_HOST_SDK")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	f, err := os.Open(filepath.Join(abs, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("--sdk %s: not a capsule-host checkout: %w", dir, err)
	}
	defer f.Close()
	if p := modulePath(f); p != selfModule {
		return "", fmt.Errorf("--sdk %s: go.mod declares module %q, want %s", dir, p, selfModule)
	}
	if _, err := os.Stat(filepath.Join(abs, "capsules", "sdk", "sdk.go")); err != nil {
		return "", fmt.Errorf("--sdk %s: no SDK in this checkout: %w", dir, err)
	}
	return abs, nil
}

// goModTidy fills the new go.mod's requirements and go.sum, bounded by
// three minutes (it may download the host's dependencies).
func goModTidy(ctx context.Context, dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("go mod tidy: the go command is not on PATH: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "mod", "tidy")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go mod tidy in %s: %w\n%s", dir, err, bytes.TrimSpace(b))
	}
	return nil
}
