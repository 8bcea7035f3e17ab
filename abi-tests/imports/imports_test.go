// Package imports checks that the host registers exactly the core imports
// the WIT contract defines: for every function of every served version of
// capsule:process, the same module name, field name and flattened core
// signature, with nothing extra and nothing missing.
package imports

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/abi-tests/internal/witsrc"
	"github.com/capsule-host/capsule-host/host/process"
	"github.com/capsule-host/capsule-host/host/tool"
	"github.com/capsule-host/capsule-host/registry"
)

func TestHostImportsMatchWIT(t *testing.T) {
	res, err := witsrc.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]witsrc.CoreFunc{}
	versions := map[string]bool{}
	for _, iface := range witsrc.Interfaces(res, "capsule:process") {
		versions[witsrc.InterfaceID(iface)] = true
		fs, err := witsrc.Imports(iface)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			want[f.Key()] = f
		}
	}
	if len(versions) < 2 {
		t.Fatalf("expected at least capsule:process@1.0.0 and @1.1.0 in wit/, got %v", versions)
	}

	reg := newRegistry(t)
	got := map[string]witsrc.CoreFunc{}
	for _, hf := range process.HostFuncs(reg) {
		cf := witsrc.CoreFunc{Module: hf.Module, Name: hf.Name, Params: hf.Params, Results: hf.Results}
		if _, dup := got[cf.Key()]; dup {
			t.Errorf("host registers %s twice", cf.Key())
		}
		if hf.Fn == nil {
			t.Errorf("host registers %s with a nil Fn", cf.Key())
		}
		got[cf.Key()] = cf
	}

	for _, k := range sortedKeys(want) {
		w := want[k]
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("missing: host does not register %s %s (WIT core type %s)", w.Module, w.Name, w.Sig())
		case g.Sig() != w.Sig():
			t.Errorf("mismatch: %s %s: host registers %s, WIT lowers to %s", w.Module, w.Name, g.Sig(), w.Sig())
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			g := got[k]
			t.Errorf("extra: host registers %s %s %s, which no served WIT version defines (served: %s)",
				g.Module, g.Name, g.Sig(), strings.Join(sortedKeys(versions), ", "))
		}
	}
	t.Logf("compared %d WIT functions across %s", len(want), strings.Join(sortedKeys(versions), ", "))
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestWitBindgenGoImportsMatchHost compares the host's registrations with
// the //go:wasmimport declarations wit-bindgen-go v0.7.0 generated for the
// worlds capsule (1.1.0) and capsule-ephemeral (1.0.0): a third-party
// generator and the host must agree on every name and core signature.
func TestWitBindgenGoImportsMatchHost(t *testing.T) {
	reg := newRegistry(t)
	host := map[string]witsrc.CoreFunc{}
	for _, hf := range process.HostFuncs(reg) {
		cf := witsrc.CoreFunc{Module: hf.Module, Name: hf.Name, Params: hf.Params, Results: hf.Results}
		host[cf.Key()] = cf
	}
	gen := map[string]witsrc.CoreFunc{}
	for _, b := range witsrc.Bindings {
		imps, _, err := witsrc.GeneratedFuncs(filepath.Join("..", filepath.FromSlash(b.Dir)))
		if err != nil {
			t.Fatal(err)
		}
		if len(imps) == 0 {
			t.Fatalf("no //go:wasmimport declarations under %s", b.Dir)
		}
		for _, f := range imps {
			gen[f.Key()] = f
		}
	}
	for _, k := range sortedKeys(gen) {
		g := gen[k]
		h, ok := host[k]
		switch {
		case !ok:
			t.Errorf("wit-bindgen-go imports %s %s, which the host does not register", g.Module, g.Name)
		case h.Sig() != g.Sig():
			t.Errorf("%s %s: wit-bindgen-go %s, host %s", g.Module, g.Name, g.Sig(), h.Sig())
		}
	}
	for _, k := range sortedKeys(host) {
		if _, ok := gen[k]; !ok {
			t.Errorf("the host registers %s, which wit-bindgen-go does not generate for any world", k)
		}
	}
}

func newRegistry(t *testing.T) *registry.Registry {
	t.Helper()
	reg, err := registry.New(registry.Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Shutdown(context.Background()) })
	return reg
}

// TestHostGuestExportsMatchWIT compares the exports the host calls on a
// guest (host/tool.Signatures: describe and call, with the core types it
// validates before instantiating) with the capsule:guest@1.0.0 WIT.
func TestHostGuestExportsMatchWIT(t *testing.T) {
	res, err := witsrc.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	ifaces := witsrc.Interfaces(res, "capsule:guest")
	if len(ifaces) != 1 {
		t.Fatalf("want one capsule:guest interface, got %d", len(ifaces))
	}
	want, err := witsrc.Exports(ifaces[0])
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]witsrc.CoreFunc{}
	for _, d := range tool.Signatures() {
		got[d.Name] = witsrc.CoreFunc{Name: d.Name, Params: d.Params, Results: d.Results}
	}
	for _, w := range want {
		g, ok := got[w.Name]
		switch {
		case !ok:
			t.Errorf("the host does not call export %s (WIT %s)", w.Name, w.Sig())
		case g.Sig() != w.Sig():
			t.Errorf("export %s: the host expects %s, the WIT lifts it as %s", w.Name, g.Sig(), w.Sig())
		}
		delete(got, w.Name)
	}
	for n, g := range got {
		if n != "cabi_realloc" {
			t.Errorf("the host expects export %s %s, which capsule:guest@1.0.0 does not define", n, g.Sig())
		}
	}
	if tool.Interface != witsrc.InterfaceID(ifaces[0]) {
		t.Errorf("host/tool.Interface = %q, WIT %q", tool.Interface, witsrc.InterfaceID(ifaces[0]))
	}
	for _, p := range witsrc.PostReturns(ifaces[0]) {
		if !strings.HasPrefix(p.Name, tool.PostPrefix) {
			t.Errorf("post-return %s does not start with host/tool.PostPrefix %q", p.Name, tool.PostPrefix)
		}
	}
}
