package e2e

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/abi-tests/internal/hosttest"
	"github.com/capsule-host/capsule-host/abi-tests/internal/witsrc"
	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

func vts(ts []api.ValueType) []engine.ValueType {
	out := make([]engine.ValueType, len(ts))
	for i, t := range ts {
		out[i] = engine.ValueType(t) // both use the wasm binary encoding
	}
	return out
}

// TestGuestModulesMatchWIT reads the core imports and exports of every
// guest module this suite runs (the built Go guests and the WAT fixtures)
// and checks each capsule:* import and each capsule:guest export against
// the WIT oracle. The Go guests must import every function of their
// version: that is what makes their end-to-end run a full check.
func TestGuestModulesMatchWIT(t *testing.T) {
	res, err := witsrc.Load(modRoot)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]witsrc.CoreFunc{}
	perModule := map[string]int{}
	for _, iface := range witsrc.Interfaces(res, "capsule:process") {
		fs, err := witsrc.Imports(iface)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			want[f.Key()] = f
		}
		perModule[witsrc.InterfaceID(iface)] = len(fs)
	}
	tools := witsrc.Interfaces(res, "capsule:guest")[0]
	exps, err := witsrc.Exports(tools)
	if err != nil {
		t.Fatal(err)
	}
	exps = append(exps, witsrc.PostReturns(tools)...)
	exps = append(exps, witsrc.CoreFunc{Name: "cabi_realloc", Params: []engine.ValueType{engine.I32, engine.I32, engine.I32, engine.I32}, Results: []engine.ValueType{engine.I32}})

	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	modules := []struct {
		name    string
		wasm    []byte
		imports string // the module whose functions must all be imported
	}{
		{"guest/full", hosttest.BuildGuest(t, modRoot, "./guest/full"), "capsule:process/host@1.1.0"},
		{"guest/ephemeral", hosttest.BuildGuest(t, modRoot, "./guest/ephemeral"), "capsule:process/host@1.0.0"},
		{"testdata/hostile/hostile.wasm", read("../testdata/hostile/hostile.wasm"), ""},
		{"testdata/hostile/minimal.wasm", read("../testdata/hostile/minimal.wasm"), ""},
		{"testdata/hostile/postreturn.wasm", read("../testdata/hostile/postreturn.wasm"), ""},
		{"testdata/hostile/layout10.wasm", read("../testdata/hostile/layout10.wasm"), ""},
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	for _, m := range modules {
		cm, err := rt.CompileModule(ctx, m.wasm)
		if err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		n := 0
		for _, d := range cm.ImportedFunctions() {
			mod, name, _ := d.Import()
			if !strings.HasPrefix(mod, "capsule:") {
				continue
			}
			got := witsrc.CoreFunc{Module: mod, Name: name, Params: vts(d.ParamTypes()), Results: vts(d.ResultTypes())}
			w, ok := want[got.Key()]
			switch {
			case !ok:
				t.Errorf("%s imports %s, which the WIT does not define", m.name, got.Key())
			case w.Sig() != got.Sig():
				t.Errorf("%s imports %s as %s, the WIT lowers it to %s", m.name, got.Key(), got.Sig(), w.Sig())
			}
			if mod == m.imports {
				n++
			}
		}
		if m.imports != "" && n != perModule[m.imports] {
			t.Errorf("%s imports %d functions of %s, want all %d", m.name, n, m.imports, perModule[m.imports])
		}
		ex := cm.ExportedFunctions()
		for _, e := range exps {
			d, ok := ex[e.Name]
			if !ok {
				if !strings.HasPrefix(e.Name, "cabi_post_") {
					t.Errorf("%s does not export %s", m.name, e.Name)
				}
				continue
			}
			got := witsrc.Sig(vts(d.ParamTypes()), vts(d.ResultTypes()))
			if got != e.Sig() {
				t.Errorf("%s exports %s as %s, the WIT lifts it as %s", m.name, e.Name, got, e.Sig())
			}
		}
	}
}
