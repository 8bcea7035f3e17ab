//go:build !leanclient

package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/capsule-host/capsule-host/host"
	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/engine/wazero"
	"github.com/capsule-host/capsule-host/host/manifest"
	"github.com/capsule-host/capsule-host/host/process"
	"github.com/capsule-host/capsule-host/registry"
	"github.com/capsule-host/capsule-host/sandbox"
	"github.com/capsule-host/capsule-host/sandbox/oci"
	"github.com/capsule-host/capsule-host/wit"
)

func init() {
	commands = append(commands,
		&command{
			name: "validate", args: "DIR|FILE.wasm", summary: "check a capsule: manifest, module checksum, imports, tools", minArgs: 1, maxArgs: 1,
			help: `Checks the capsule in DIR the way serve would load it: the Capsule.toml
(strictly: unknown keys and wrong types are errors), the module's pinned
SHA-256, every import against the contract versions this binary serves,
and the tools the module describes. Problems are printed as
file:line: message and the exit code is 1. Backends and launch profiles
are accepted here; the daemon checks them against its config.

For a component, validate shows its world: each imported interface with
the host version that serves it or why none does (--json "error":
unsupported, mismatch or malformed), and each export with its functions.
Given a .wasm file instead of DIR, it checks that binary alone (a core
module or a component, no manifest): its kind and its world.`,
			run: runValidate,
		},
		&command{
			name: "wit", args: "[VERSION]", summary: "print the embedded WIT contract", maxArgs: 1,
			help: `Prints the WIT contract compiled into this binary: every released package
version, or those matching VERSION ("1.1.0", "1.1", "process",
"process@1.0.0", "guest"). --list lists the versions only. --out DIR
writes the whole contract as a WIT directory that wit-bindgen, jco and
componentize-js read as-is: capsule:guest (the worlds) in DIR, every
capsule:process version in DIR/deps/. Use it to write a capsule in any
language (world capsule:guest/capsule).`,
			flags: func(fs *flag.FlagSet, o *opts) {
				fs.BoolVar(&o.list, "list", false, "list the package versions instead of printing them")
				fs.StringVar(&o.witOut, "out", "", "write the contract as a WIT directory (package and deps/) to `DIR`")
			},
			run: runWIT,
		},
		&command{
			name: "version", args: "", summary: "print the version, the engines compiled in and the contract versions served", maxArgs: 0,
			run: runVersion,
		},
		&command{
			name: "token", args: "", summary: "generate a bearer token and the hash to put in the host config", maxArgs: 0,
			help: `Generates a random bearer token (256 bits) for the loopback TCP listener
and prints it with its SHA-256. Put the hash in the host config under
[principals.NAME] token_sha256; give the token to the caller (for example
as $CAPSULE_HOST_TOKEN). The daemon never stores the token itself.`,
			run: runToken,
		},
	)
}

// validateReport is validate's --json output.
type validateReport struct {
	Dir     string          `json:"dir"`
	OK      bool            `json:"ok"`
	Capsule string          `json:"capsule,omitempty"`
	Version string          `json:"version,omitempty"`
	Module  string          `json:"module,omitempty"`
	SHA256  string          `json:"sha256,omitempty"`
	Kind    string          `json:"kind,omitempty"` // "core module" or "component"
	Imports []validateGroup `json:"imports,omitempty"`
	// Exports are a component's exported interfaces and functions (its
	// world's export half); a core module's are checked by the load.
	Exports  []validateExport `json:"exports,omitempty"`
	Tools    []string         `json:"tools,omitempty"`
	Problems []string         `json:"problems,omitempty"`
}

type validateGroup struct {
	Module    string `json:"module"`
	Functions int    `json:"functions"`
	Status    string `json:"status"`
	// Error is the class of an import the host refuses: "unsupported"
	// (not served), "mismatch" (served, another WIT) or "malformed".
	Error string `json:"error,omitempty"`
}

type validateExport struct {
	Name      string   `json:"name"`
	Sort      string   `json:"sort"`
	Functions []string `json:"functions"`
	Status    string   `json:"status"`
}

func runValidate(e *env, o *opts, args []string) error {
	dir, err := filepath.Abs(args[0])
	if err != nil {
		return err
	}
	rep := validateReport{Dir: dir}
	problem := func(err error) {
		var me *manifest.Error
		if errors.As(err, &me) {
			rep.Problems = append(rep.Problems, me.Error())
			return
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %v", filepath.Join(dir, manifest.FileName), err))
	}
	if fi, err := os.Stat(dir); err == nil && fi.Mode().IsRegular() {
		validateBinary(e.ctx, dir, &rep, problem)
	} else {
		validateCapsule(e.ctx, dir, pinHint(args[0]), &rep, problem)
	}
	rep.OK = len(rep.Problems) == 0
	if e.g.json {
		if err := printJSON(e.stdout, rep); err != nil {
			return err
		}
	} else {
		printValidate(e.stdout, e.stderr, &rep)
	}
	if !rep.OK {
		return &exitError{code: exitFailed}
	}
	return nil
}

// validateCapsule checks the capsule in dir as serve would load it,
// reporting each problem; a problem that makes the next step meaningless
// stops there. hint is the fix for a pin absent, malformed or stale.
func validateCapsule(ctx context.Context, dir, hint string, rep *validateReport, problem func(error)) {
	m, err := manifest.Load(dir)
	if err != nil {
		var me *manifest.Error
		if errors.As(err, &me) && me.Key == "capsule.sha256" {
			err = &manifest.Error{File: me.File, Line: me.Line, Key: me.Key, Msg: me.Msg + "; " + hint}
		}
		problem(err)
		return
	}
	rep.Capsule, rep.Version, rep.Module = m.Name, m.Version, m.Module
	wasm, err := readPinned(m, hint, rep, problem)
	if err != nil {
		problem(err)
		return
	}
	if err := listImports(ctx, m, wasm, rep); err != nil {
		problem(err)
		return
	}
	if err := scratchLoad(ctx, dir, m, rep); err != nil {
		problem(err)
	}
}

// validateBinary checks a core module or component binary alone, with
// no manifest (so no pin, policy or tools): its kind and its world, each
// import served or refused with its typed class. For a component built
// but not yet given a Capsule.toml.
func validateBinary(ctx context.Context, path string, rep *validateReport, problem func(error)) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		problem(err)
		return
	}
	sum := sha256.Sum256(wasm)
	rep.Module, rep.SHA256 = filepath.Base(path), hex.EncodeToString(sum[:])
	if err := listImports(ctx, &manifest.Manifest{File: path}, wasm, rep); err != nil {
		var me *manifest.Error
		if errors.As(err, &me) {
			err = &manifest.Error{File: path, Msg: me.Msg} // no manifest key to name
		}
		problem(err)
	}
}

// readPinned reads the module and reports (without stopping) a checksum
// other than the manifest's pin, with hint, the command that fixes it.
func readPinned(m *manifest.Manifest, hint string, rep *validateReport, problem func(error)) ([]byte, error) {
	mp, err := m.ModulePath()
	if err != nil {
		return nil, err
	}
	wasm, err := os.ReadFile(mp)
	if err != nil {
		return nil, m.Errorf("capsule.module", "%v", err)
	}
	sum := sha256.Sum256(wasm)
	rep.SHA256 = hex.EncodeToString(sum[:])
	if rep.SHA256 != m.SHA256 {
		problem(m.Errorf("capsule.sha256", "the module's SHA-256 is %s; the manifest pins %s; %s", rep.SHA256, m.SHA256, hint))
	}
	return wasm, nil
}

// listImports lists the module's imports by module, each with whether
// this binary serves it, from the module itself.
func listImports(ctx context.Context, m *manifest.Manifest, wasm []byte, rep *validateReport) error {
	eng, err := wazero.New(ctx, engine.EngineConfig{}, nil)
	if err != nil {
		return err
	}
	defer eng.Close(ctx)
	if k, _ := component.Detect(wasm); k == component.KindComponent {
		rep.Kind = "component"
		// Both halves of the world are listed, even when an import is refused.
		err := listComponentImports(m, wasm, rep)
		if xerr := listComponentExports(m, wasm, rep); err == nil {
			err = xerr
		}
		return err
	}
	rep.Kind = "core module"
	if err := component.CheckCore(wasm, process.Served()); err != nil {
		return m.Errorf("capsule.module", "%v", err) // another component version: say so, not "invalid version header"
	}
	mod, err := eng.Compile(ctx, wasm)
	if err != nil {
		return m.Errorf("capsule.module", "not a valid wasm module: %v", err)
	}
	defer mod.Close(ctx)
	served := map[string]bool{}
	for _, p := range wit.Packages() {
		served[p.Name+"@"+p.Version] = true
	}
	count := map[string]int{}
	for _, imp := range mod.Imports() {
		count[imp.Module]++
	}
	mods := make([]string, 0, len(count))
	for k := range count {
		mods = append(mods, k)
	}
	sort.Strings(mods)
	for _, mn := range mods {
		st := "not served"
		switch {
		case mn == "wasi_snapshot_preview1":
			st = "granted (WASI preview1: no files, empty args and env)"
		default:
			if pkg, ver, ok := witModule(mn); ok && served[pkg+"@"+ver] {
				st = "served" + manifestNote(m, pkg)
			}
		}
		rep.Imports = append(rep.Imports, validateGroup{Module: mn, Functions: count[mn], Status: st})
	}
	return nil
}

// listComponentImports lists a component's imported interfaces with
// the version that serves each; an unserved one, or a capsule:process
// import whose WIT differs from the host's, is the problem. The scratch
// load then links it for real.
func listComponentImports(m *manifest.Manifest, wasm []byte, rep *validateReport) error {
	ims, err := host.ComponentImports(wasm)
	for _, im := range ims {
		st, class := "served as "+im.Served, ""
		if im.Err != nil {
			st, class = "not served: "+im.Err.Error(), errorClass(im.Err)
		} else if pkg, _, ok := witModule(im.Served); ok && strings.HasPrefix(pkg, "capsule:") {
			st += manifestNote(m, pkg)
		}
		rep.Imports = append(rep.Imports, validateGroup{Module: im.Name, Functions: im.Functions, Status: st, Error: class})
	}
	if err != nil {
		return m.Errorf("capsule.module", "%v", err)
	}
	return nil
}

// manifestNote says how the manifest declares the served package pkg;
// nothing for a binary validated alone (no manifest).
func manifestNote(m *manifest.Manifest, pkg string) string {
	if m.Dir == "" {
		return ""
	}
	if d, ok := m.Imports[pkg]; ok {
		return fmt.Sprintf(" (manifest: %q = %q)", pkg, d)
	}
	return " (not declared in [imports])"
}

// errorClass names a component refusal's typed class for --json.
func errorClass(err error) string {
	switch {
	case errors.Is(err, component.ErrMismatch):
		return "mismatch"
	case errors.Is(err, component.ErrUnsupported):
		return "unsupported"
	case errors.Is(err, component.ErrMalformed):
		return "malformed"
	}
	return "error"
}

// listComponentExports lists what a component exports and whether the
// host calls it; the scratch load then checks the tool interface's
// functions for real.
func listComponentExports(m *manifest.Manifest, wasm []byte, rep *validateReport) error {
	exs, err := host.ComponentExports(wasm)
	if err != nil {
		return m.Errorf("capsule.module", "%v", err)
	}
	for _, ex := range exs {
		st := "not used by the host"
		if ex.Called {
			st = "called by the host (the capsule's tools)"
		}
		rep.Exports = append(rep.Exports, validateExport{Name: ex.Name, Sort: ex.Sort, Functions: ex.Functions, Status: st})
	}
	return nil
}

// scratchLoad is the real load, in a scratch host with nothing to run
// processes: import signatures, exports, policy and describe, exactly as
// serve. Every backend is offered, with the policy data of one that has
// no profiles in full: the manifest's profile is known by name only.
func scratchLoad(ctx context.Context, dir string, m *manifest.Manifest, rep *validateReport) error {
	tmp, err := os.MkdirTemp("", "capsule-host-validate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	reg, err := registry.New(registry.Config{StateDir: tmp, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer reg.Shutdown(context.WithoutCancel(ctx))
	var profiles []string
	if m.Capabilities.Profile != "" {
		profiles = []string{m.Capabilities.Profile}
	}
	h, err := host.New(ctx, host.Config{
		Registry: reg, StateDir: tmp, Logger: slog.New(slog.DiscardHandler), CacheDir: host.EnvCacheDir(""),
		Backends: []string{"local", "bwrap", "oci"}, Profiles: profiles, AllowNetwork: true,
		Policies: map[string]sandbox.BackendPolicy{"oci": oci.PolicyOf(nil)},
	})
	if err != nil {
		return err
	}
	defer h.Close(context.WithoutCancel(ctx))
	c, err := h.Load(ctx, dir)
	if err != nil {
		return locate(m, err)
	}
	for _, t := range c.Tools() {
		rep.Tools = append(rep.Tools, t.Name)
	}
	return nil
}

// locate gives a load error that carries no manifest position the line of
// the manifest key it is about, so every problem reads file:line: message.
func locate(m *manifest.Manifest, err error) error {
	var me *manifest.Error
	if errors.As(err, &me) {
		return err
	}
	var ie *host.ImportError
	switch {
	case errors.As(err, &ie):
		if pkg, _, ok := witModule(ie.Module); ok {
			if _, declared := m.Imports[pkg]; declared {
				return m.Errorf(`imports."`+pkg+`"`, "%v", err)
			}
		}
		return m.Errorf("imports", "%v", err)
	case errors.Is(err, host.ErrPolicy):
		return m.Errorf("capabilities", "%v", err)
	}
	return m.Errorf("capsule.module", "%v", err)
}

// witModule splits "capsule:process/host@1.1.0".
func witModule(mod string) (pkg, ver string, ok bool) {
	left, ver, ok := strings.Cut(mod, "@")
	if !ok {
		return "", "", false
	}
	pkg, _, ok = strings.Cut(left, "/")
	return pkg, ver, ok
}

// printWorld prints the module's imports and, for a component, its
// exports: the component's world as the host sees it.
func printWorld(out io.Writer, rep *validateReport) {
	if len(rep.Imports) > 0 {
		fmt.Fprintln(out)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		head := "IMPORT MODULE"
		if rep.Kind == "component" {
			head = "IMPORT INTERFACE"
		}
		fmt.Fprintf(tw, "%s\tFUNCTIONS\tSTATUS\n", head)
		for _, g := range rep.Imports {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", g.Module, g.Functions, g.Status)
		}
		tw.Flush()
	}
	if len(rep.Exports) > 0 {
		fmt.Fprintln(out)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "EXPORT\tFUNCTIONS\tSTATUS")
		for _, ex := range rep.Exports {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", ex.Name, strings.Join(ex.Functions, ", "), ex.Status)
		}
		tw.Flush()
	}
}

func printValidate(out, errw io.Writer, rep *validateReport) {
	if rep.Capsule != "" {
		fmt.Fprintf(out, "capsule  %s %s\n", rep.Capsule, rep.Version)
	}
	if rep.Module != "" {
		fmt.Fprintf(out, "module   %s (%s, sha256 %s)\n", rep.Module, rep.Kind, abbreviate(rep.SHA256, 16))
	}
	printWorld(out, rep)
	if len(rep.Tools) > 0 {
		fmt.Fprintf(out, "\ntools    %s\n", strings.Join(rep.Tools, ", "))
	}
	if rep.Capsule != "" {
		var ids []string
		for _, p := range wit.Packages() {
			ids = append(ids, p.ID())
		}
		fmt.Fprintf(out, "served   %s\n", strings.Join(ids, ", "))
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(errw, p)
	}
	switch {
	case rep.OK && rep.Capsule == "":
		fmt.Fprintf(out, "\nok: the host serves every import of %s (a %s alone: no manifest, so no pin, policy or tools checked)\n", rep.Dir, rep.Kind)
	case rep.OK:
		fmt.Fprintf(out, "\nok: %s is a valid capsule\n", rep.Dir)
	default:
		fmt.Fprintf(errw, "%s\n", plural(len(rep.Problems), "problem", "problems"))
	}
}

func runWIT(e *env, o *opts, args []string) error {
	sel := ""
	if len(args) == 1 {
		sel = args[0]
	}
	if o.witOut != "" {
		return writeWIT(e, o.witOut, sel)
	}
	pkgs, err := wit.Find(sel)
	if err != nil {
		return err
	}
	if o.list || e.g.json {
		type entry struct {
			Package string   `json:"package"`
			Version string   `json:"version"`
			Files   []string `json:"files"`
		}
		var list []entry
		for _, p := range pkgs {
			list = append(list, entry{p.Name, p.Version, p.Files})
		}
		if e.g.json {
			return printJSON(e.stdout, list)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PACKAGE\tVERSION\tFILES")
		for _, p := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Package, p.Version, strings.Join(p.Files, " "))
		}
		return tw.Flush()
	}
	for i, p := range pkgs {
		for j, f := range p.Files {
			b, err := fs.ReadFile(wit.FS, f)
			if err != nil {
				return err
			}
			if len(pkgs) > 1 || len(p.Files) > 1 {
				if i > 0 || j > 0 {
					fmt.Fprintln(e.stdout)
				}
				fmt.Fprintf(e.stdout, "// ---- wit/%s ----\n", f)
			}
			if _, err := e.stdout.Write(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeWIT is wit --out: the whole contract, since the worlds import
// every version (a VERSION selection is refused, not half-honoured).
func writeWIT(e *env, dir, sel string) error {
	if sel != "" {
		return usagef("wit --out writes the whole contract (the worlds import every version); drop %q", sel)
	}
	files, err := wit.WriteDir(dir)
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintln(e.stdout, filepath.Join(dir, f))
	}
	return nil
}

// versionInfo is version's --json output.
type versionInfo struct {
	Version       string   `json:"version"`
	Go            string   `json:"go"`
	Platform      string   `json:"platform"`
	Engines       []string `json:"engines"`
	DefaultEngine string   `json:"default_engine"`
	Contracts     []string `json:"contracts"`
}

func runVersion(e *env, o *opts, _ []string) error {
	v := versionInfo{
		Version: binVersion(), Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		Engines: host.Engines(), DefaultEngine: "wazero",
	}
	for _, p := range wit.Packages() {
		v.Contracts = append(v.Contracts, p.ID())
	}
	if e.g.json {
		return printJSON(e.stdout, v)
	}
	fmt.Fprintf(e.stdout, "capsule-host %s (%s, %s)\n", v.Version, v.Go, v.Platform)
	eng := make([]string, len(v.Engines))
	for i, n := range v.Engines {
		eng[i] = n
		if n == v.DefaultEngine {
			eng[i] += " (default)"
		}
	}
	fmt.Fprintf(e.stdout, "engines:   %s\n", strings.Join(eng, ", "))
	fmt.Fprintf(e.stdout, "contracts: %s\n", strings.Join(v.Contracts, ", "))
	return nil
}

func runToken(e *env, o *opts, _ []string) error {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(tok))
	h := hex.EncodeToString(sum[:])
	if e.g.json {
		return printJSON(e.stdout, map[string]string{"token": tok, "sha256": h})
	}
	fmt.Fprintf(e.stdout, "token:  %s\nsha256: %s\n\nIn capsule-host.toml:\n\n  [principals.NAME]\n  token_sha256 = [\"%s\"]\n\nGive the token to the caller (CAPSULE_HOST_TOKEN); it is not stored anywhere.\n", tok, h, h)
	return nil
}
