//go:build !wasip1

package abi

import "sync"

// Off wasm (unit tests on the host), guest addresses are synthetic: each
// allocation gets a fresh 8-aligned 32-bit address from a bump counter, so
// the scope logic runs unchanged and tests can play the host with Poke.
var fake struct {
	sync.Mutex
	next uint32
}

func addrOf(_ *uint64, size uint32) uint32 {
	fake.Lock()
	defer fake.Unlock()
	if fake.next == 0 || fake.next > 0xC000_0000 {
		fake.next = 0x10000
	}
	a := fake.next
	fake.next = AlignTo(a+size+64, 8)
	return a
}
