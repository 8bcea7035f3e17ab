package registry

import (
	"errors"
	"slices"
	"testing"
)

func TestPlaceOrder(t *testing.T) {
	n := func(name string, capacity, running int) DirNode {
		return DirNode{Name: name, Capacity: capacity, Running: running}
	}
	three := []DirNode{n("a", 2, 0), n("b", 2, 1), n("c", 2, 0)}
	for _, tc := range []struct {
		name    string
		policy  Placement
		self    string
		running int
		nodes   []DirNode
		want    []string
	}{
		{"local-first with room stays here", PlaceLocalFirst, "b", 1, three, []string{"b"}},
		{"local-first full: least loaded others, by name", PlaceLocalFirst, "b", 2, three, []string{"a", "c"}},
		{"self's exact load beats its published one", PlaceLocalFirst, "a", 2, three, []string{"c", "b"}},
		{"least-loaded ties prefer this node", PlaceLeastLoaded, "c", 0, three, []string{"c", "a", "b"}},
		{"least-loaded picks the emptiest", PlaceLeastLoaded, "b", 1, three, []string{"a", "c", "b"}},
		{"every node full", PlaceLocalFirst, "a", 2, []DirNode{n("a", 2, 0), n("b", 2, 2), n("c", 1, 5)}, []string{}},
		{"capacity 0 is no cap", PlaceLocalFirst, "a", 2, []DirNode{n("a", 9, 0), n("b", 0, 100)}, []string{"b"}},
		{"self's capacity is the local one, not its record's", PlaceLocalFirst, "a", 2, []DirNode{n("a", 8, 0), n("b", 2, 0)}, []string{"b"}},
		{"self not registered (re-registering): only others", PlaceLeastLoaded, "z", 0, three, []string{"a", "c", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := placeOrder(tc.policy, n(tc.self, 2, tc.running), tc.nodes)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("placeOrder = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParsePlacement(t *testing.T) {
	for in, want := range map[string]Placement{"": PlaceLocalFirst, "local": PlaceLocal, "least-loaded": PlaceLeastLoaded, "local-first": PlaceLocalFirst} {
		if got, err := ParsePlacement(in); err != nil || got != want {
			t.Errorf("ParsePlacement(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"random", "LOCAL", " local"} {
		if _, err := ParsePlacement(bad); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("ParsePlacement(%q): %v, want invalid-input", bad, err)
		}
	}
}

// TestNodeFullIsRegistryFull: the class crosses the wire and maps onto
// WIT registry-full.
func TestNodeFullIsRegistryFull(t *testing.T) {
	if !errors.Is(ErrNodeFull, ErrRegistryFull) {
		t.Fatal("ErrNodeFull does not unwrap to ErrRegistryFull")
	}
	back := DecodeRemoteError(EncodeRemoteError(ErrNodeFull), "b")
	if !errors.Is(back, ErrNodeFull) || !errors.Is(back, ErrRegistryFull) {
		t.Fatalf("round trip: %v", back)
	}
}
