// Package componenttest builds real component binaries for tests: it
// wraps a core capsule into a component with the jco pinned in
// host/component/testdata/build (componentEmbed + componentNew with the
// wasi_snapshot_preview1 reactor adapter), the way a user would.
//
// It needs node and `npm ci` run in that directory (make component-deps);
// without them a test skips, saying what to run.
package componenttest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capsule-host/capsule-host/internal/goadapt"
	"github.com/capsule-host/capsule-host/wit"
)

// Dir is host/component/testdata/build, found from this file.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "build")
}

// Root is the repository root.
func Root() string { return filepath.Join(Dir(), "..", "..", "..", "..") }

// Wrap turns the core module at core (a path) into a component for the
// WIT world (e.g. "capsule:guest/capsule" from the repo's wit/), written
// under t.TempDir(); it returns the component's path. The build takes a
// few seconds and is bounded by a minute.
func Wrap(t testing.TB, core, world string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIP (component fixtures): node is not installed; install node and run `npm ci --prefix host/component/testdata/build` (make component-deps)")
	}
	if _, err := os.Stat(filepath.Join(Dir(), "node_modules", "@bytecodealliance", "jco", "package.json")); err != nil {
		t.Skip("SKIP (component fixtures): jco is not installed; run `npm ci --prefix host/component/testdata/build` (make component-deps)")
	}
	out := filepath.Join(t.TempDir(), filepath.Base(core)+".component.wasm")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "build.mjs", filepath.Join(Root(), "wit"), world, core, out)
	cmd.Dir = Dir()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("jco build of %s: %v\n%s", core, err, b)
	}
	return out
}

// WrapGo turns a Go capsule's core module at core (built with
// capsules/sdk) into a component that runs: goadapt.Inject adds the
// cabi_realloc_adapter wit-component hands the preview1 adapter, then
// Wrap. The component is kept under testdata/build/.cache (git-ignored),
// keyed by the SHA-256 of the adapted module, the world, the lockfile,
// the build script and the WIT files, so a test binary that asks again
// (or the next run) reuses it and a changed input rebuilds it.
func WrapGo(t testing.TB, core, world string) string {
	t.Helper()
	needJco(t)
	in, err := os.ReadFile(core)
	if err != nil {
		t.Fatal(err)
	}
	adapted, _, err := goadapt.Inject(in)
	if err != nil {
		t.Fatalf("goadapt %s: %v", core, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "go %d %s\n", len(adapted), world)
	h.Write(adapted)
	wits, _ := filepath.Glob(filepath.Join(Root(), "wit", "*", "*.wit"))
	for _, p := range append([]string{filepath.Join(Dir(), "package-lock.json"), filepath.Join(Dir(), "build.mjs")}, wits...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(p), len(b))
		h.Write(b)
	}
	out := filepath.Join(Dir(), ".cache", "go-"+hex.EncodeToString(h.Sum(nil))[:16]+".wasm")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	src := filepath.Join(t.TempDir(), filepath.Base(core))
	if err := os.WriteFile(src, adapted, 0o644); err != nil {
		t.Fatal(err)
	}
	built := Wrap(t, src, world)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	writeWhole(t, out, b)
	return out
}

// writeWhole writes b to path under a temporary name, then renames it: a
// concurrent test binary sees the old state or the complete file.
func writeWhole(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		t.Fatal(err)
	}
	_, werr := tmp.Write(b)
	if cerr := tmp.Close(); werr != nil || cerr != nil {
		os.Remove(tmp.Name())
		t.Fatal(werr, cerr)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		t.Fatal(err)
	}
}

// Testcap is the Go conformance capsule testcap in the form a component
// can carry: built with -tags capsule_v11only (its 1.1.0 tools, not its
// 1.0.0 ones). It returns the core module's path; WrapGo makes it a
// component.
func Testcap(t testing.TB) string {
	t.Helper()
	return BuildGo(t, "capsules/testcap", TestcapTags...)
}

// TestcapTags are the build tags of that form of testcap.
var TestcapTags = []string{"capsule_v11only"}

var goBuilds sync.Map // pkg and tags → *goBuild

type goBuild struct {
	once sync.Once
	path string
	err  error
}

// BuildGo builds the Go capsule in pkg (a directory under the repository
// root, "capsules/testcap") for wasip1 as capsules/build.sh does, with
// the given build tags, once per test binary, into testdata/build/.cache;
// it returns the core module's path. For a form of a capsule that is not
// committed (testcap without its 1.0.0 tools, which a component cannot
// carry beside 1.1.0's). Bounded by five minutes (a cold build compiles
// the standard library for wasip1).
func BuildGo(t testing.TB, pkg string, tags ...string) string {
	t.Helper()
	key := pkg + " " + strings.Join(tags, ",")
	v, _ := goBuilds.LoadOrStore(key, &goBuild{})
	gb := v.(*goBuild)
	gb.once.Do(func() {
		name := filepath.Base(pkg) + "-" + strings.Join(tags, "-")
		gb.path = filepath.Join(Dir(), ".cache", "gobuild-"+name+".wasm")
		if gb.err = os.MkdirAll(filepath.Dir(gb.path), 0o755); gb.err != nil {
			return
		}
		tmp, err := os.MkdirTemp(filepath.Dir(gb.path), "gobuild-")
		if err != nil {
			gb.err = err
			return
		}
		defer os.RemoveAll(tmp)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out := filepath.Join(tmp, "m.wasm")
		cmd := exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-trimpath", "-buildvcs=false", "-ldflags=-buildid=",
			"-tags="+strings.Join(tags, ","), "-o", out, "./"+pkg)
		cmd.Dir = Root()
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
		if b, err := cmd.CombinedOutput(); err != nil {
			gb.err = fmt.Errorf("go build %s (tags %v): %v\n%s", pkg, tags, err, b)
			return
		}
		gb.err = os.Rename(out, gb.path)
	})
	if gb.err != nil {
		t.Fatal(gb.err)
	}
	return gb.path
}

// Dummy builds wit-component's dummy component for world from the WIT
// packages in witDir (one folder per package, like the repo's wit/): a
// real component whose import types are exactly that WIT's, whose
// exports trap. It takes seconds and is bounded by a minute.
func Dummy(t testing.TB, witDir, world string) string {
	t.Helper()
	node := needJco(t)
	out := filepath.Join(t.TempDir(), "dummy.wasm")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "build.mjs", witDir, world, "-", out, "--dummy")
	cmd.Dir = Dir()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("jco dummy build of %s from %s: %v\n%s", world, witDir, err, b)
	}
	return out
}

// BuildJS builds the JavaScript capsule at src (a path) with the pinned
// componentize-js against the embedded WIT (wit.WriteDir, the layout of
// `capsule-host wit --out`) for world, with its WASI
// features enabled or disabled. A build takes minutes, so the result is
// kept under testdata/build/.cache (git-ignored), keyed by the SHA-256
// of everything that goes into it: the source, the WIT files, the
// lockfile, the build script and the flag.
func BuildJS(t testing.TB, src, world string, wasi bool) string {
	t.Helper()
	node := needJco(t)
	flag := ""
	if wasi {
		flag = "--wasi"
	}
	h := sha256.New()
	inputs := []string{src, filepath.Join(Dir(), "package-lock.json"), filepath.Join(Dir(), "jsbuild.mjs")}
	wits, _ := filepath.Glob(filepath.Join(Root(), "wit", "*", "*.wit"))
	for _, p := range append(inputs, wits...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(p), len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "%s %s\n", world, flag)
	out := filepath.Join(Dir(), ".cache", hex.EncodeToString(h.Sum(nil))[:16]+".wasm")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := out + ".tmp"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The WIT goes in exactly as `capsule-host wit --out` writes it.
	witDir := filepath.Join(t.TempDir(), "wit")
	if _, err := wit.WriteDir(witDir); err != nil {
		t.Fatal(err)
	}
	args := []string{"jsbuild.mjs", witDir, world, src, tmp}
	if flag != "" {
		args = append(args, flag)
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = Dir()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("componentize-js build of %s: %v\n%s", src, err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// needJco skips without node or the npm packages, saying what to run.
func needJco(t testing.TB) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIP (component fixtures): node is not installed; install node and run `make npm-deps`")
	}
	for _, p := range []string{"jco", "componentize-js", "preview2-shim"} {
		if _, err := os.Stat(filepath.Join(Dir(), "node_modules", "@bytecodealliance", p, "package.json")); err != nil {
			t.Skipf("SKIP (component fixtures): @bytecodealliance/%s is not installed; run `make npm-deps`", p)
		}
	}
	return node
}

// BuildC compiles the C capsule at src (a path) with clang for
// wasm32-wasi as a reactor against Debian's wasi-libc (the sysroot
// /usr/lib/wasm32-wasi; `make deps` installs clang, lld, wasi-libc and
// the wasm32 compiler-rt builtins), then makes it a component for world
// with Wrap: the README's C recipe. It skips, saying what to install,
// only when one of those is missing; a compile error fails.
func BuildC(t testing.TB, src, world string) string {
	t.Helper()
	return Wrap(t, CompileC(t, src), world)
}

// CompileC is BuildC's first step: clang's core module (a wasip1
// reactor importing capsule:process by the core-module conventions, so
// it also loads as a core capsule), written under t.TempDir().
func CompileC(t testing.TB, src string) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Skip("SKIP (C component fixture): clang is not installed; run `make deps` (apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32)")
	}
	if _, err := os.Stat("/usr/lib/wasm32-wasi/libc.a"); err != nil {
		t.Skip("SKIP (C component fixture): the wasi-libc sysroot /usr/lib/wasm32-wasi is missing; run `make deps` (apt-get install wasi-libc)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// wasm-ld links compiler-rt's wasm32 builtins; clang names where it
	// looks for them.
	rt, err := exec.CommandContext(ctx, clang, "--target=wasm32-wasi", "-print-libgcc-file-name").Output()
	if err != nil {
		t.Fatalf("clang -print-libgcc-file-name: %v", err)
	}
	if _, err := os.Stat(strings.TrimSpace(string(rt))); err != nil {
		t.Skipf("SKIP (C component fixture): compiler-rt's wasm32 builtins %s are missing; run `make deps` (apt-get install libclang-rt-14-dev-wasm32)", strings.TrimSpace(string(rt)))
	}
	core := filepath.Join(t.TempDir(), "capsule.wasm")
	cmd := exec.CommandContext(ctx, clang, "--target=wasm32-wasi", "-O2", "-mexec-model=reactor", "-Wall", "-Werror", "-o", core, src)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang %s: %v\n%s", src, err, b)
	}
	return core
}
