//go:build !wasip1

package process

import (
	"errors"
	"testing"

	"github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"
	"github.com/capsule-host/capsule-host/capsules/sdk/internal/wire"
)

// These tests play the host through the import variables (off wasm the
// imports are plain Go functions): they read the lowered arguments from
// the guest's scope and write results with cabi_realloc, as a host does.

func hostStr(ptr, n uint32) string {
	var pair [8]byte
	abi.PutU32(pair[:], 0, ptr)
	abi.PutU32(pair[:], 4, n)
	l := abi.Lifter{M: abi.Current()}
	return l.String(pair[:], 0, "arg")
}

func hostPutStr(b []byte, off uint32, v string) {
	p := abi.Realloc(0, 0, 1, uint32(len(v)))
	abi.Current().Poke(p, []byte(v))
	abi.PutU32(b, off, p)
	abi.PutU32(b, off+4, uint32(len(v)))
}

func retBuf(t *testing.T, rp uint32, ok *abi.Type) []byte {
	rt := wire.ResultOf(ok, wire.LErrorCode11)
	if rp%rt.Align != 0 {
		t.Fatalf("retptr %#x misaligned for %d", rp, rt.Align)
	}
	b, found := abi.Current().Load(rp, rt.Size)
	if !found {
		t.Fatal("retptr is not guest memory of this call")
	}
	return b
}

func TestReadSinceBinding(t *testing.T) {
	impReadSince = func(idP, idL, stream, curD, curP, curL, maxBytes, ret uint32) {
		if hostStr(idP, idL) != "pid" || stream != 1 || curD != 1 || hostStr(curP, curL) != "c1" || maxBytes != 99 {
			t.Errorf("args: stream %d cursor %d max %d", stream, curD, maxBytes)
		}
		b := retBuf(t, ret, &wire.LLogChunk)
		hostPutStr(b, 8, "data")
		hostPutStr(b, 16, "c2")
		abi.PutU64(b, 24, 5)
		b[32] = 1
	}
	defer func() { impReadSince = func(_, _, _, _, _, _, _, _ uint32) { noHost() } }()
	c, err := ReadSince("pid", Stderr, Ptr("c1"), 99)
	if err != nil || string(c.Data) != "data" || c.Next != "c2" || c.BytesDropped != 5 || !c.EOF {
		t.Errorf("ReadSince = %+v, %v", c, err)
	}
}

func TestSpawnPersistentBinding(t *testing.T) {
	impSpawnPersistent = func(params, ret uint32) {
		pt := wire.LSpawnPersistentParams
		if params%pt.Align != 0 {
			t.Errorf("params pointer %#x misaligned", params)
		}
		p, ok := abi.Current().Load(params, pt.Size)
		if !ok {
			t.Fatal("params tuple not in guest memory")
		}
		if hostStr(abi.GetU32(p, 0), abi.GetU32(p, 4)) != "/bin/cat" {
			t.Error("cmd not at tuple offset 0")
		}
		po := pt.Offs[1]
		if p[po+12] != 1 || hostStr(abi.GetU32(p, po+4), abi.GetU32(p, po+8)) != "lbl" {
			t.Error("persist-options not at tuple offset 64")
		}
		b := retBuf(t, ret, &abi.String)
		b[0] = 1
		b[8] = byte(ErrPersistUnsupported)
	}
	defer func() { impSpawnPersistent = func(_, _ uint32) { noHost() } }()
	_, err := SpawnPersistent(SpawnRequest{Cmd: "/bin/cat"}, PersistOptions{Label: Ptr("lbl"), KeepStdinOpen: true})
	if !errors.Is(err, ErrPersistUnsupported) {
		t.Errorf("err = %v", err)
	}
}

func TestHandleDropIdempotent(t *testing.T) {
	n := 0
	impHDrop = func(self uint32) {
		if self != 3 {
			t.Errorf("drop of %d", self)
		}
		n++
	}
	defer func() { impHDrop = func(uint32) { noHost() } }()
	h := &Handle{h: 3}
	h.Drop()
	h.Drop()
	if n != 1 {
		t.Errorf("dropped %d times", n)
	}
}
