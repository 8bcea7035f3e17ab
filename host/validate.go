package host

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/host/manifest"
	"github.com/capsule-host/capsule-host/host/tool"
)

// exportRealloc is the allocator every guest exports for the host.
const exportRealloc = "cabi_realloc"

// wasiModule is granted to every guest without a declaration: it is the
// runtime the guest language needs, not a capability. The capability is
// in what the engine gives it: no preopens, empty args and env.
const wasiModule = "wasi_snapshot_preview1"

// wasiPreview1 is every preview1 function with its core signature
// ("params>results", i = i32, I = i64). All are accepted: a guest that
// merely links path_open gets EBADF at run time since nothing is
// preopened, so refusing it at load would buy no security.
// TestWASITableMatchesWazero keeps this in step with the engine.
var wasiPreview1 = map[string]string{
	"args_get": "ii>i", "args_sizes_get": "ii>i", "clock_res_get": "ii>i", "clock_time_get": "iIi>i",
	"environ_get": "ii>i", "environ_sizes_get": "ii>i", "fd_advise": "iIIi>i", "fd_allocate": "iII>i",
	"fd_close": "i>i", "fd_datasync": "i>i", "fd_fdstat_get": "ii>i", "fd_fdstat_set_flags": "ii>i",
	"fd_fdstat_set_rights": "iII>i", "fd_filestat_get": "ii>i", "fd_filestat_set_size": "iI>i",
	"fd_filestat_set_times": "iIIi>i", "fd_pread": "iiiIi>i", "fd_prestat_dir_name": "iii>i", "fd_prestat_get": "ii>i",
	"fd_pwrite": "iiiIi>i", "fd_read": "iiii>i", "fd_readdir": "iiiIi>i", "fd_renumber": "ii>i",
	"fd_seek": "iIii>i", "fd_sync": "i>i", "fd_tell": "ii>i", "fd_write": "iiii>i", "path_create_directory": "iii>i",
	"path_filestat_get": "iiiii>i", "path_filestat_set_times": "iiiiIIi>i", "path_link": "iiiiiii>i",
	"path_open": "iiiiiIIii>i", "path_readlink": "iiiiii>i", "path_remove_directory": "iii>i", "path_rename": "iiiiii>i",
	"path_symlink": "iiiii>i", "path_unlink_file": "iii>i", "poll_oneoff": "iiii>i", "proc_exit": "i>",
	"proc_raise": "i>i", "random_get": "ii>i", "sched_yield": ">i", "sock_accept": "iii>i", "sock_recv": "iiiiii>i",
	"sock_send": "iiiii>i", "sock_shutdown": "ii>i",
}

// sig renders a core signature compactly, the same way as wasiPreview1.
func sig(params, results []engine.ValueType) string {
	var b strings.Builder
	w := func(vs []engine.ValueType) {
		for _, v := range vs {
			switch v {
			case engine.I32:
				b.WriteByte('i')
			case engine.I64:
				b.WriteByte('I')
			case engine.F32:
				b.WriteByte('f')
			case engine.F64:
				b.WriteByte('F')
			default:
				b.WriteByte('?')
			}
		}
	}
	w(params)
	b.WriteByte('>')
	w(results)
	return b.String()
}

// pretty renders "iI>i" as "(i32, i64) -> (i32)" for error messages.
func pretty(s string) string {
	name := map[rune]string{'i': "i32", 'I': "i64", 'f': "f32", 'F': "f64", '?': "?"}
	ps, rs, _ := strings.Cut(s, ">")
	f := func(x string) string {
		var out []string
		for _, c := range x {
			out = append(out, name[c])
		}
		return "(" + strings.Join(out, ", ") + ")"
	}
	return f(ps) + " -> " + f(rs)
}

// served is what this host links: WIT module → function → signature.
type served struct {
	funcs map[string]map[string]string
	// modules lists every served WIT module, sorted.
	modules []string
}

func newServed(funcs []engine.HostFunc, modules []string) *served {
	s := &served{funcs: map[string]map[string]string{}}
	for _, m := range modules {
		s.funcs[m] = map[string]string{}
	}
	for _, f := range funcs {
		if s.funcs[f.Module] == nil {
			s.funcs[f.Module] = map[string]string{}
		}
		s.funcs[f.Module][f.Name] = sig(f.Params, f.Results)
	}
	for m := range s.funcs {
		s.modules = append(s.modules, m)
	}
	sort.Strings(s.modules)
	return s
}

// witModule splits "ns:pkg/iface@1.2.3" into "ns:pkg" and "1.2.3".
var witModuleRE = regexp.MustCompile(`^([a-z][a-z0-9-]*:[a-z][a-z0-9-]*)/[a-z][a-z0-9-]*@([0-9]+\.[0-9]+\.[0-9]+.*)$`)

// samePackage lists the served modules of pkg.
func (s *served) samePackage(pkg string) []string {
	var out []string
	for _, m := range s.modules {
		if strings.HasPrefix(m, pkg+"/") {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return s.modules
	}
	return out
}

// validateImports checks every import of the module before anything is
// instantiated: the module, the function and the core signature must be
// served, and every WIT package imported must be declared in the manifest
// at a version that covers it (versionMatches). Declared but unused is fine (a declaration is a
// ceiling, not an obligation), but a declaration must name a contract
// version this host serves.
func (s *served) validateImports(m *manifest.Manifest, imports []engine.FuncDef) error {
	name := m.Name
	for pkg, ver := range m.Imports {
		ok := false
		for _, mod := range s.modules {
			if g := witModuleRE.FindStringSubmatch(mod); g != nil && g[1] == pkg && versionMatches(ver, g[2]) {
				ok = true
			}
		}
		if !ok {
			key := `imports."` + pkg + `"`
			return fmt.Errorf("%w: capsule %q: %w", ErrImport, name,
				m.Errorf(key, "version %s is not served (this host serves %s)", ver, strings.Join(s.samePackage(pkg), ", ")))
		}
	}
	for _, imp := range imports {
		got := sig(imp.Params, imp.Results)
		if imp.Module == wasiModule {
			want, ok := wasiPreview1[imp.Name]
			switch {
			case !ok:
				return &ImportError{Capsule: name, Module: imp.Module, Name: imp.Name, Reason: "not a WASI preview1 function"}
			case want != got:
				return &ImportError{Capsule: name, Module: imp.Module, Name: imp.Name,
					Reason: fmt.Sprintf("signature %s does not match WASI preview1 %s", pretty(got), pretty(want))}
			}
			continue
		}
		fns, ok := s.funcs[imp.Module]
		if !ok {
			pkg := ""
			if g := witModuleRE.FindStringSubmatch(imp.Module); g != nil {
				pkg = g[1]
			}
			return &ImportError{Capsule: name, Module: imp.Module, Name: imp.Name, Reason: "not served", Served: s.samePackage(pkg)}
		}
		want, ok := fns[imp.Name]
		if !ok {
			return &ImportError{Capsule: name, Module: imp.Module, Name: imp.Name, Reason: "no such function in " + imp.Module, Served: s.samePackage(imp.Module[:max(0, strings.IndexByte(imp.Module, '/'))])}
		}
		if want != got {
			return &ImportError{Capsule: name, Module: imp.Module, Name: imp.Name,
				Reason: fmt.Sprintf("core signature %s does not match the host's %s", pretty(got), pretty(want))}
		}
		g := witModuleRE.FindStringSubmatch(imp.Module)
		if g == nil {
			continue // a non-WIT host module (none today) needs no declaration
		}
		ver, declared := m.Imports[g[1]]
		if !declared {
			return fmt.Errorf("%w: capsule %q: %w", ErrImport, name,
				m.Errorf("imports", "the module imports %q but [imports] does not declare %q", imp.Module, g[1]))
		}
		if !versionMatches(ver, g[2]) {
			return fmt.Errorf("%w: capsule %q: %w", ErrImport, name,
				m.Errorf(`imports."`+g[1]+`"`, "declares %s but the module imports %q", ver, imp.Module))
		}
	}
	return nil
}

// versionMatches reports whether an import of version actual is covered
// by the declared contract version: same major, and not newer. So "1.1"
// covers 1.0.0 and 1.1.x (a capsule may import both tiers), "1.1.0"
// covers 1.0.x and 1.1.0, and nothing covers 2.0.0.
func versionMatches(declared, actual string) bool {
	d, ok1 := parseVersion(declared)
	a, ok2 := parseVersion(actual)
	if !ok1 || !ok2 || d[0] != a[0] {
		return false
	}
	if a[1] != d[1] {
		return a[1] < d[1]
	}
	return d[2] < 0 || a[2] <= d[2]
}

// parseVersion parses MAJOR.MINOR[.PATCH] (a missing patch is -1: any).
func parseVersion(s string) ([3]int, bool) {
	v := [3]int{0, 0, -1}
	s, _, _ = strings.Cut(s, "-") // pre-release tags do not take part
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// validateExports checks the capsule:guest@1.0.0 world's exports.
func validateExports(capsule string, exports []engine.FuncDef) error {
	want := map[string]string{exportRealloc: "iiii>i"}
	names := []string{}
	for _, d := range tool.Signatures() {
		want[d.Name] = sig(d.Params, d.Results)
		names = append(names, d.Name)
	}
	names = append(names, exportRealloc)
	have := map[string]string{}
	for _, e := range exports {
		have[e.Name] = sig(e.Params, e.Results)
	}
	for _, n := range names {
		got, ok := have[n]
		if !ok {
			return fmt.Errorf("%w: capsule %q: the module does not export %q (capsule:guest@1.0.0)", ErrExport, capsule, n)
		}
		if got != want[n] {
			return fmt.Errorf("%w: capsule %q: export %q has core signature %s, want %s", ErrExport, capsule, n, pretty(got), pretty(want[n]))
		}
	}
	return nil
}
