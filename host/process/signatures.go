package process

import "github.com/capsule-host/capsule-host/host/internal/cabi"

// Signatures returns the WIT function types of every served interface
// version, by module name ("capsule:process/host@1.1.0"), so that a
// component's import of the interface can be checked at the WIT level
// (record fields, variant cases, parameter names) before it is linked.
// Every module Served() lists has an entry (TestSignaturesCoverServed).
func Signatures() map[string][]*cabi.Func {
	out := map[string][]*cabi.Func{}
	for _, v := range []*version{ver10, ver11, ver12} {
		for _, d := range v.funcs {
			out[v.module] = append(out[v.module], d.f)
		}
	}
	return out
}
