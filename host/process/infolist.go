package process

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/capsule-host/capsule-host/host/internal/cabi"
	"github.com/capsule-host/capsule-host/registry"
)

// infoList is list<process-info> lowered by hand (a cabi.ListLowerer):
// each record's fields are written straight into the element buffer at
// the offsets its cabi.Type computed, where processInfo boxes some twenty
// Values per record for the generic path to walk. list-processes and
// status-many return it; at 500 processes the boxing was a fifth of the
// host's lowering (RFC.md §18). It writes byte for byte what the generic
// path writes for the same Info, with the same cabi_realloc calls in the
// same order: the strings of each record in field order, then the list
// (TestInfoListMatchesGeneric, FuzzInfoList).
type infoList struct {
	is  []registry.Info
	v12 bool
}

// infoLayout is where process-info's fields sit in one version, read
// from its cabi.Type once.
type infoLayout struct {
	t   *cabi.Type
	off []uint32 // the fields' offsets
	// Payload offsets: of option<T> for a 4-byte and an 8-byte T, of
	// option<exit-info> and option<enum>; exit-info's field offsets.
	opt4, opt8, optExit, optEnum uint32
	exitOff                      []uint32
	// 1.2.0: option<terminal-info>'s payload and terminal-info's fields,
	// option<bool>'s payload.
	optTerm, optBool uint32
	termOff          []uint32
}

var info11, info12 = newInfoLayout(tProcessInfo), newInfoLayout(tProcessInfo12)

// newInfoLayout reads the offsets. The field indexes are those of
// processInfo11 (and 1.2.0's four after them); a type that does not
// match panics at init, which every test of the package catches.
func newInfoLayout(t *cabi.Type) infoLayout {
	fs := t.Fields()
	lay := infoLayout{
		t: t, off: t.Offsets(),
		opt4: fs[3].Type.PayloadOffset(), optExit: fs[5].Type.PayloadOffset(),
		optEnum: fs[6].Type.PayloadOffset(), opt8: fs[12].Type.PayloadOffset(),
		exitOff: tExitInfo.Offsets(),
	}
	if fs[4].Type != tPhase || fs[6].Type.Cases()[1].Type != tExitReason || tPhase.Size() != 1 || tExitReason.Size() != 1 {
		panic("process: process-info's layout is not the one infoList writes")
	}
	if len(fs) > len(processInfo11) {
		lay.optTerm, lay.optBool = fs[14].Type.PayloadOffset(), fs[15].Type.PayloadOffset()
		lay.termOff = tTerminalInfo.Offsets()
	}
	return lay
}

// LowerList writes the list (cabi.ListLowerer).
func (x infoList) LowerList(l *cabi.Lowerer, elem *cabi.Type) (uint32, uint32, error) {
	lay := &info11
	if x.v12 {
		lay = &info12
	}
	if elem != lay.t {
		return 0, 0, fmt.Errorf("%w: a list of %s lowered as list<%s>", cabi.ErrABI, lay.t, elem)
	}
	size := uint64(elem.Size())
	if uint64(len(x.is))*size > cabi.MaxLength {
		return 0, 0, fmt.Errorf("%w: list<%s> of %d elements exceeds 2^28-1 bytes", cabi.ErrABI, elem, len(x.is))
	}
	buf := make([]byte, uint64(len(x.is))*size)
	for k := range x.is {
		if err := lay.store(l, buf[uint64(k)*size:uint64(k+1)*size], &x.is[k], x.v12); err != nil {
			return 0, 0, cabi.At("["+strconv.Itoa(k)+"]", err)
		}
	}
	p, _, err := l.StoreBytes(buf, elem.Align(), "list<"+elem.String()+">")
	return p, uint32(len(x.is)), err
}

// store writes one process-info into b (zeroed, its size), as processInfo
// and the generic lowering do.
func (lay *infoLayout) store(l *cabi.Lowerer, b []byte, i *registry.Info, v12 bool) error {
	le := binary.LittleEndian
	o := lay.off
	for k, s := range [3]string{i.ID, utf8Safe(i.Label), utf8Safe(i.Command)} {
		if err := putString(l, b, o[k], s); err != nil {
			return cabi.At("."+processInfo11[k].Name, err)
		}
	}
	if i.OSPid != nil {
		b[o[3]] = 1
		le.PutUint32(b[o[3]+lay.opt4:], *i.OSPid)
	}
	if err := putEnum(b, o[4], uint32(i.Phase), tPhase); err != nil {
		return cabi.At(".phase", err)
	}
	if e := i.Exit; e != nil {
		b[o[5]] = 1
		p := o[5] + lay.optExit
		putOptS32(b, p+lay.exitOff[0], lay.opt4, e.Code)
		putOptS32(b, p+lay.exitOff[1], lay.opt4, e.Signal)
	}
	if r := i.Reason; r != nil {
		b[o[6]] = 1
		if err := putEnum(b, o[6]+lay.optEnum, uint32(*r), tExitReason); err != nil {
			return cabi.At(".exit-reason.some", err)
		}
	}
	le.PutUint64(b[o[7]:], durMs(i.Age))
	le.PutUint64(b[o[8]:], durMs(i.Idle))
	le.PutUint64(b[o[9]:], i.BufferedBytes)
	le.PutUint64(b[o[10]:], i.BytesDropped)
	if i.StdinOpen {
		b[o[11]] = 1
	}
	if i.CPU != nil {
		b[o[12]] = 1
		le.PutUint64(b[o[12]+lay.opt8:], durMs(*i.CPU))
	}
	if i.MemPeak != nil {
		b[o[13]] = 1
		le.PutUint64(b[o[13]+lay.opt8:], *i.MemPeak)
	}
	if v12 {
		return lay.storeTerminal(l, b, i)
	}
	return nil
}

// storeTerminal writes 1.2.0's four fields, as infoTerminal does.
func (lay *infoLayout) storeTerminal(l *cabi.Lowerer, b []byte, i *registry.Info) error {
	le := binary.LittleEndian
	o := lay.off
	if t := i.Terminal; t != nil {
		b[o[14]] = 1
		p := o[14] + lay.optTerm
		le.PutUint16(b[p+lay.termOff[0]:], t.Rows)
		le.PutUint16(b[p+lay.termOff[1]:], t.Cols)
		if err := putString(l, b, p+lay.termOff[2], utf8Safe(t.Term)); err != nil {
			return cabi.At(".terminal.some.term", err)
		}
	}
	if w := i.WaitingForInput; w != nil {
		b[o[15]] = 1
		if *w {
			b[o[15]+lay.optBool] = 1
		}
	}
	if d := i.ReapIn; d != nil {
		b[o[16]] = 1
		le.PutUint64(b[o[16]+lay.opt8:], durMs(*d))
	}
	if r := i.ReapRule; r != nil {
		b[o[17]] = 1
		if err := putEnum(b, o[17]+lay.optEnum, uint32(*r), tExitReason); err != nil {
			return cabi.At(".reap-rule.some", err)
		}
	}
	return nil
}

// putString lowers s (store_string) and writes its (ptr, len) at b[off:].
func putString(l *cabi.Lowerer, b []byte, off uint32, s string) error {
	p, n, err := l.StoreString(s)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(b[off:], p)
	binary.LittleEndian.PutUint32(b[off+4:], n)
	return nil
}

// putEnum writes a one-byte enum discriminant, refusing a value outside
// the enum as the generic path refuses it.
func putEnum(b []byte, off, v uint32, t *cabi.Type) error {
	if v >= uint32(len(t.Cases())) {
		return fmt.Errorf("%w: host value %d is not a case of %s", cabi.ErrABI, v, t)
	}
	b[off] = byte(v)
	return nil
}

// putOptS32 writes option<s32> at b[off:] (payload at off+pay).
func putOptS32(b []byte, off, pay uint32, v *int32) {
	if v != nil {
		b[off] = 1
		binary.LittleEndian.PutUint32(b[off+pay:], uint32(*v))
	}
}
