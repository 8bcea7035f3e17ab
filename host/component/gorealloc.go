package component

import "fmt"

// A Go (gc) wasip1 reactor wrapped with the preview1 reactor adapter
// runs only if the adapter's allocator is not Go code: the adapter
// allocates its state through the main module's cabi_realloc
// ("__main_module__") on the first WASI call, which Go's runtime makes
// inside _initialize, before any go:wasmexport may run. Go throws, the
// throw's own write re-enters the adapter, and the start function dies
// out of bounds. wit-component binds that import to the main module's
// cabi_realloc_adapter export when there is one; internal/goadapt adds
// one written in wasm (a bump allocator over an arena capsules/sdk
// reserves). So Compile refuses, by name, a Go module (its producers
// section says which language built it) whose export the adapter would
// call is anything else, instead of trapping at the first instance.
func refuseGoAdapter(m *coreModule, args map[string]coreInst, off int) *Error {
	inst, ok := args["__main_module__"].(bagInst)
	if !ok {
		return nil
	}
	_, wants := m.importFuncs[[2]string{"__main_module__", "cabi_realloc"}]
	it, ok := inst["cabi_realloc"]
	if !wants || !ok || it.from == nil || !it.from.goRuntime || it.export == goAdapterRealloc {
		return nil
	}
	return &Error{Section: "core instance", Offset: off,
		Construct: "a Go (gc) wasip1 reactor wrapped with the wasi_snapshot_preview1 adapter, without " + goAdapterRealloc,
		Reason:    fmt.Sprintf("the adapter would call the Go module's %s during Go's _initialize, before the Go runtime can run a go:wasmexport (%s)", it.export, it.what),
		Hint:      "add " + goAdapterRealloc + " before componentNew (`go run ./internal/goadapt/cmd/goadapt IN.wasm OUT.wasm`, for a capsules/sdk guest), or load the wasip1 core module itself (Capsule.toml's module)",
		kind:      ErrUnsupported}
}

// goAdapterRealloc is the main-module export wit-component gives the
// preview1 adapter as its cabi_realloc, when the module has it.
const goAdapterRealloc = "cabi_realloc_adapter"

// producedByGo reports whether a core module's producers custom
// section lists language Go.
func producedByGo(core []byte) bool {
	r := &reader{b: core, pos: 8, section: "core module"}
	for r.pos < len(r.b) && r.err == nil {
		id := r.byte()
		size := int(r.u32())
		if r.err != nil || size > len(r.b)-r.pos {
			return false
		}
		end := r.pos + size
		if id == 0 {
			sec := &reader{b: r.b[:end], pos: r.pos, section: "custom"}
			if sec.name() == "producers" && languageGo(sec) {
				return true
			}
		}
		r.pos = end
	}
	return false
}

func languageGo(r *reader) bool {
	fields := int(r.u32())
	for i := 0; i < fields && r.err == nil; i++ {
		field := r.name()
		n := int(r.u32())
		for j := 0; j < n && r.err == nil; j++ {
			name := r.name()
			r.name() // version
			if field == "language" && name == "Go" {
				return r.err == nil
			}
		}
	}
	return false
}
