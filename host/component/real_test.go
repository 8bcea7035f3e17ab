package component_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/host/component"
	"github.com/capsule-host/capsule-host/host/component/componenttest"
	"github.com/capsule-host/capsule-host/host/engine"
	"github.com/capsule-host/capsule-host/internal/goadapt"
)

var served = []string{"capsule:process/host@1.0.0", "capsule:process/host@1.1.0"}

// TestRealComponents parses what jco makes of our own core capsules and
// checks the structure wit-component gives them, then that CheckCore
// refuses them by name (WASI 0.2, imported by the preview1 adapter).
func TestRealComponents(t *testing.T) {
	for _, tc := range []struct{ core, world, iface string }{
		{"capsules/testcap/testcap.wasm", "capsule:guest/capsule", "capsule:process/host@1.1.0"},
		{"capsules/testcap10/testcap10.wasm", "capsule:guest/capsule-ephemeral", "capsule:process/host@1.0.0"},
	} {
		t.Run(filepath.Base(tc.core), func(t *testing.T) {
			path := componenttest.Wrap(t, filepath.Join(componenttest.Root(), tc.core), tc.world)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if k, err := component.Detect(b); k != component.KindComponent || err != nil {
				t.Fatalf("Detect = %v, %v", k, err)
			}
			c, err := component.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			// main module, adapter, shim, fixups
			if len(c.CoreModules) < 2 || len(c.Components) != 1 {
				t.Fatalf("%d core modules, %d nested components", len(c.CoreModules), len(c.Components))
			}
			var imports []string
			for _, im := range c.Imports {
				if im.Sort == component.SortInstance {
					imports = append(imports, im.Name)
				}
			}
			if !slices.Contains(imports, tc.iface) || !slices.ContainsFunc(imports, func(n string) bool { return strings.HasPrefix(n, "wasi:cli/environment@0.2.") }) {
				t.Fatalf("imports %v", imports)
			}
			if len(c.Exports) != 1 || c.Exports[0].Name != "capsule:guest/tool@1.0.0" || c.Exports[0].Sort != component.SortInstance {
				t.Fatalf("exports %+v", c.Exports)
			}
			// describe (no params: no realloc) and call (string params);
			// both return pointers, so both have a post-return.
			lifts, reallocs := 0, 0
			for _, cn := range c.Canons {
				if cn.Kind == component.CanonLift {
					lifts++
					if cn.Memory < 0 || cn.PostReturn < 0 {
						t.Fatalf("lift without memory or post-return: %+v", cn)
					}
					if cn.Realloc >= 0 {
						reallocs++
					}
				}
			}
			if lifts != 2 || reallocs != 1 {
				t.Fatalf("%d canon lifts (%d with realloc), want 2 (1)", lifts, reallocs)
			}
			err = component.CheckCore(b, served)
			var e *component.Error
			if !errors.Is(err, component.ErrUnsupported) || !errors.As(err, &e) || !strings.HasPrefix(e.Construct, `import "wasi:`) || e.Section != "import" {
				t.Fatalf("CheckCore = %v", err)
			}
			if !strings.Contains(err.Error(), "capsule-host wit") || strings.Contains(err.Error(), "version header") {
				t.Fatalf("message %q", err)
			}
		})
	}
}

// BenchmarkParseReal: parsing and checking the jco-wrapped testcap
// (about 4.5 MB), the work Load adds in front of Compile.
func BenchmarkParseReal(b *testing.B) {
	path := componenttest.Wrap(b, filepath.Join(componenttest.Root(), "capsules/testcap/testcap.wasm"), "capsule:guest/capsule")
	bin, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(bin)))
	for b.Loop() {
		if err := component.CheckCore(bin, served); !errors.Is(err, component.ErrUnsupported) {
			b.Fatal(err)
		}
	}
}

// TestMixedVersionComponentRefused: the committed testcap imports
// capsule:process/host@1.0.0 and 1.1.0; jco (wit-component) wraps it for
// a world importing 1.1.0 and merges the 1.0.0 imports into 1.1.0's,
// whose error-code has more cases, so the guest's 1.0.0 calls would be
// lowered with 1.1.0's layout. The host refuses it at load, naming both
// versions, the function and where the types differ. Before this check
// the component loaded and its 1.0.0 calls misread results; the shell,
// which then imported 1.1.0's and 1.2.0's spawn-persistent, had its
// persist-options read with a field more than the guest wrote.
func TestMixedVersionComponentRefused(t *testing.T) {
	path := componenttest.WrapGo(t, filepath.Join(componenttest.Root(), "capsules/testcap/testcap.wasm"), "capsule:guest/capsule")
	m, err := compileHosted(t, parseFile(t, path))
	if err == nil {
		m.Close(context.Background())
		t.Fatal("a component lowering 1.1.0's functions into a module built against 1.0.0 loaded")
	}
	var vm *component.VersionMismatch
	if !errors.As(err, &vm) || !errors.Is(err, component.ErrMismatch) {
		t.Fatalf("want a *VersionMismatch (ErrMismatch), got %T: %v", err, err)
	}
	if vm.Module != "capsule:process/host@1.0.0" || vm.Lowered != "capsule:process/host@1.1.0" || vm.Func == "" ||
		!strings.Contains(vm.Path, "error-code") || vm.Want == vm.Got {
		t.Fatalf("mismatch names %+v", vm)
	}
	for _, want := range []string{vm.Module, vm.Lowered, vm.Func, "semver"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %q: %v", want, err)
		}
	}
}

// TestGoComponentArena: the Go testcap made a component with goadapt
// instantiates (Go's _initialize runs, its WASI calls go through the
// adapter, whose state and stack come from the SDK's arena), and the
// adapter's footprint in the arena leaves a quarter of it free (it is
// 128 KiB of the 256 KiB on jco 1.35.0's adapter). The footprint
// is the arena's last non-zero byte: the arena starts zeroed and the
// adapter's stack, allocated last, is used from its top.
func TestGoComponentArena(t *testing.T) {
	core := componenttest.Testcap(t)
	bin, err := os.ReadFile(core)
	if err != nil {
		t.Fatal(err)
	}
	_, arena, err := goadapt.Inject(bin)
	if err != nil {
		t.Fatal(err)
	}
	m := compileComponent(t, componenttest.WrapGo(t, core, "capsule:guest/capsule"))
	in, err := m.Instantiate(context.Background(), engine.InstanceConfig{Name: "arena"})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(context.Background())
	if _, err := in.Call(context.Background(), "capsule:guest/tool@1.0.0#describe"); err != nil {
		t.Fatal(err)
	}
	b, ok := in.Memory().Read(uint32(arena.Base), uint32(arena.Size))
	if !ok {
		t.Fatalf("arena %+v outside memory", arena)
	}
	used := len(bytes.TrimRight(b, "\x00"))
	t.Logf("adapter uses %d of the arena's %d bytes", used, arena.Size)
	if used == 0 || uint64(used) > arena.Size*3/4 {
		t.Fatalf("adapter footprint %d bytes in an arena of %d", used, arena.Size)
	}
}
