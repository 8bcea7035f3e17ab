package registry

import (
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/blake2b"
)

// TestKeyOf: the pooled hash is the keyed blake2b-256 of the ID, for
// any ID (empty, malformed, huge), from many goroutines at once and with
// two registries of different keys sharing the pool.
func TestKeyOf(t *testing.T) {
	a, b := newEnv(t, nil), newEnv(t, nil)
	b.r.hashKey[0] ^= 0xff
	want := func(key [32]byte, id string) procKey {
		h, _ := blake2b.New256(key[:])
		h.Write([]byte(id))
		var k procKey
		h.Sum(k[:0])
		return k
	}
	raw, _ := newRawID()
	ids := []string{"", raw, "not-an-id", "\xff\x00", strings.Repeat("x", 5000), raw + "x"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 50 {
				for _, id := range ids {
					e := []*env{a, b}[g%2]
					if got := e.r.keyOf(id); got != want(e.r.hashKey, id) {
						t.Errorf("keyOf(%.20q) differs from blake2b", id)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if a.r.keyOf(raw) == b.r.keyOf(raw) {
		t.Fatal("two keys hash an ID alike")
	}
}
