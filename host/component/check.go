package component

import (
	"strings"
)

// hintWIT is what a capsule author can do about an import the host does
// not serve.
const hintWIT = "build the capsule against the WIT this host serves: capsule-host wit --out DIR writes it"

// CheckCore is the gate in front of an engine's Compile, which compiles
// core modules only. A core module (or bytes that are not wasm at all,
// which the engine reports) passes with nil. A component is parsed and
// validated, then refused with a typed *Error: ErrMalformed for a broken
// binary, ErrUnsupported naming the first import this host does not
// serve (served lists the interfaces it does, "ns:pkg/iface@x.y.z",
// matched semver-compatibly), or else ErrUnsupported saying that a
// component goes through component.Compile (Host.Load does that), not
// an engine's Compile.
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

// Explain says why the valid component c is not for an engine's
// Compile: the first instance import no interface of served satisfies
// (semver-compatibly, as at load), else that components are compiled by
// component.Compile.
func Explain(c *Component, served []string) *Error {
	s := servedNames(served)
	for _, im := range c.Imports {
		if im.Sort != SortInstance {
			continue
		}
		if _, err := s.resolve(im.Name, im.Offset); err != nil {
			e := err.(*Error)
			if len(served) > 0 && !strings.Contains(e.Reason, "(this host serves") {
				e.Reason += " (this host serves " + strings.Join(served, ", ") + ")"
			}
			e.Hint = hintWIT
			return e
		}
	}
	return &Error{Offset: c.Offset, Construct: "a component",
		Reason: "an engine compiles core modules only; a component is linked by component.Compile",
		Hint:   "load it through the host (Host.Load, serve, validate), which runs components on wazero", kind: ErrUnsupported}
}
