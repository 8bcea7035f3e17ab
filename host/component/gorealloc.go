package component

import "fmt"

// A Go (gc) wasip1 reactor cannot run wrapped with the preview1 reactor
// adapter, on this host or any other: the adapter allocates its state
// through the main module's cabi_realloc ("__main_module__") on the
// first WASI call, which Go's runtime makes inside _initialize, before
// any go:wasmexport may run. Go throws, the throw's own write re-enters
// the adapter, and the start function dies out of bounds. The producers
// section says which language built the module, so Compile refuses the
// combination by name instead of trapping at the first instance.
func refuseGoAdapter(m *coreModule, args map[string]coreInst, off int) *Error {
	inst, ok := args["__main_module__"].(bagInst)
	if !ok {
		return nil
	}
	_, wants := m.importFuncs[[2]string{"__main_module__", "cabi_realloc"}]
	it, ok := inst["cabi_realloc"]
	if !wants || !ok || it.from == nil || !it.from.goRuntime {
		return nil
	}
	return &Error{Section: "core instance", Offset: off,
		Construct: "a Go (gc) wasip1 reactor wrapped with the wasi_snapshot_preview1 adapter",
		Reason:    fmt.Sprintf("the adapter calls the Go module's cabi_realloc during Go's _initialize, before the Go runtime can run a go:wasmexport (%s)", it.what),
		Hint:      "load the wasip1 core module itself (Capsule.toml's module), or build the guest for wasip2 directly",
		kind:      ErrUnsupported}
}

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
