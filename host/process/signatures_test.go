package process

import "testing"

// A served version without WIT signatures would let a component's
// import of it through unchecked.
func TestSignaturesCoverServed(t *testing.T) {
	sigs := Signatures()
	for _, m := range Served() {
		if len(sigs[m]) == 0 {
			t.Errorf("%s is served but has no WIT signatures", m)
		}
	}
	for m := range sigs {
		found := false
		for _, s := range Served() {
			found = found || s == m
		}
		if !found {
			t.Errorf("signatures for %s, which is not served", m)
		}
	}
}
