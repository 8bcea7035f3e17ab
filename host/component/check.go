package component

import (
	"fmt"
	"slices"
	"strings"
)

// hintCore is what a capsule author can do today.
const hintCore = "this host runs core modules: point Capsule.toml's module at the wasip1 reactor module the component was made from (the input of `jco componentEmbed`/`componentNew` or `wasm-tools component new`)"

// CheckCore is the gate in front of an engine's Compile. A core module
// (or bytes that are not wasm at all, which the engine reports) passes
// with nil. A component is parsed and validated, then refused with a
// typed *Error: ErrMalformed for a broken binary, ErrUnsupported naming
// the first import this host does not serve (served lists the
// interfaces it does, "ns:pkg/iface@x.y.z"), or else the core instance
// graph, which the engine seam cannot link yet.
func CheckCore(wasm []byte, served []string) error {
	k, err := Detect(wasm)
	if k == KindCoreModule {
		return nil
	}
	if k == KindUnknown {
		if len(wasm) >= 8 && wasm[6] == 1 && wasm[7] == 0 {
			return err // a component of another version: say so
		}
		return nil // not wasm, or a core module of another version: the engine's words
	}
	c, err := Parse(wasm)
	if err != nil {
		return err
	}
	return Explain(c, served)
}

// Explain says why the host cannot run the valid component c: the first
// instance import that is not one of served (by exact name: a WASI 0.2 or
// other interface), else its core instance graph.
func Explain(c *Component, served []string) *Error {
	for _, im := range c.Imports {
		if im.Sort != SortInstance || slices.Contains(served, im.Name) {
			continue
		}
		what := "this host serves " + strings.Join(served, ", ") + " to components"
		if strings.HasPrefix(im.Name, "wasi:") {
			what = "WASI 0.2 interfaces are not served to components yet"
		}
		return &Error{Section: "import", Offset: im.Offset, Construct: fmt.Sprintf("import %q", im.Name),
			Reason: what, Hint: hintCore, kind: ErrUnsupported}
	}
	off := c.Offset
	if len(c.CoreInstances) > 0 {
		off = c.CoreInstances[0].Offset
	}
	return &Error{Section: "core instance", Offset: off,
		Construct: fmt.Sprintf("core instance graph (%d core modules, %d core instances, %d nested components)", len(c.CoreModules), len(c.CoreInstances), len(c.Components)),
		Reason:    "linking a component's core instances is not implemented on the engine seam yet", Hint: hintCore, kind: ErrUnsupported}
}
