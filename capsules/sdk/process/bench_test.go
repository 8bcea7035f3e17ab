//go:build !wasip1

package process

import (
	"errors"
	"strings"
	"testing"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
)

// The guest-side cost of one binding (lowering, return area, lifting an
// error-code) with a host that answers no-such-process at once:
//
//	go test -run '^$' -bench Binding -benchmem ./capsules/sdk/process/
func BenchmarkStatusBinding(b *testing.B) {
	impStatus = func(idP, idL, ret uint32) {
		m, _ := abi.Current().Load(ret, 8+136)
		m[0], m[8] = 1, byte(ErrNoSuchProcess)
	}
	defer func() { impStatus = func(_, _, _ uint32) { noHost() } }()
	id := strings.Repeat("a", 52)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Status(id); !errors.Is(err, ErrNoSuchProcess) {
			b.Fatal(err)
		}
	}
}
