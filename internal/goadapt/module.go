package goadapt

// Section ids of the core binary format.
const (
	secCustom = 0
	secType   = 1
	secImport = 2
	secFunc   = 3
	secMemory = 5
	secGlobal = 6
	secExport = 7
	secCode   = 10
	secData   = 11
)

var sectionNames = [...]string{"custom", "type", "import", "function", "table", "memory", "global", "export", "start", "element", "code", "data", "data count", "tag"}

type section struct {
	id         byte
	start, end int // payload
}

// segment is an active data segment of memory 0 at a constant address.
type segment struct {
	addr uint64
	data []byte
}

// module is what Inject needs to know of a core module.
type module struct {
	b            []byte
	secs         []section
	types        int // type entries
	reallocType  int // index of (i32 i32 i32 i32) -> i32, or -1
	importFuncs  int
	importGlobs  int
	funcs        int // defined functions (function section)
	globals      int // defined globals
	codes        int // code section entries
	memMin       uint64
	hasMemory    bool
	exports      map[string]bool
	segments     []segment
	nameSec      int // index into secs of the "name" custom section, or -1
	sectionIndex map[byte]int
}

// parse reads the module's sections and the parts of them Inject uses.
func parse(b []byte) (*module, *Error) {
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, &Error{Section: "header", Reason: "no \\0asm magic", kind: ErrMalformed}
	}
	if string(b[4:8]) != "\x01\x00\x00\x00" {
		return nil, &Error{Section: "header", Offset: 4, Reason: "not a version 1 core module (a component? goadapt takes the core module)", kind: ErrUnsupported}
	}
	m := &module{b: b, reallocType: -1, nameSec: -1, exports: map[string]bool{}, sectionIndex: map[byte]int{}}
	r := newReader(b, 8, len(b), "module")
	for r.pos < r.end && r.err == nil {
		id := r.byte()
		size := int(r.u32())
		start := r.pos
		r.bytes(size)
		if r.err != nil {
			break
		}
		if int(id) >= len(sectionNames) {
			r.fail(ErrMalformed, "unknown section id %d", id)
			break
		}
		if id != secCustom {
			if _, dup := m.sectionIndex[id]; dup {
				r.fail(ErrMalformed, "second %s section", sectionNames[id])
				break
			}
			m.sectionIndex[id] = len(m.secs)
		} else if newReader(b, start, start+size, "custom").name() == "name" {
			m.nameSec = len(m.secs)
		}
		m.secs = append(m.secs, section{id: id, start: start, end: start + size})
	}
	if r.err != nil {
		return nil, r.err
	}
	for _, s := range m.secs {
		if err := m.readSection(s); err != nil {
			return nil, err
		}
	}
	return m, m.check()
}

func (m *module) readSection(s section) *Error {
	r := newReader(m.b, s.start, s.end, sectionNames[s.id])
	switch s.id {
	case secType:
		m.readTypes(r)
	case secImport:
		m.readImports(r)
	case secFunc:
		m.funcs = r.count(1)
		for i := 0; i < m.funcs; i++ {
			r.u32()
		}
	case secMemory:
		if n := r.count(2); n > 0 {
			m.memMin, m.hasMemory = r.limits(), true
			for i := 1; i < n; i++ {
				r.limits()
			}
		}
	case secGlobal:
		m.globals = r.count(3)
		for i := 0; i < m.globals; i++ {
			r.bytes(2) // value type, mutability
			r.constExpr()
		}
	case secExport:
		m.readExports(r)
	case secCode:
		m.codes = r.count(1)
		for i := 0; i < m.codes; i++ {
			r.bytes(int(r.u32()))
		}
	case secData:
		m.readData(r)
	default:
		return nil // copied as they are
	}
	r.done()
	return r.err
}

// check refuses a module the tool cannot adapt, naming why.
func (m *module) check() *Error {
	for _, id := range []byte{secType, secFunc, secGlobal, secExport, secCode, secData} {
		if _, ok := m.sectionIndex[id]; !ok {
			return &Error{Section: sectionNames[id], Reason: "the module has no " + sectionNames[id] + " section (a Go module always has one)", kind: ErrUnsupported}
		}
	}
	if m.funcs != m.codes {
		return &Error{Section: "code", Offset: m.secs[m.sectionIndex[secCode]].start, Reason: "the code section's count differs from the function section's", kind: ErrMalformed}
	}
	if !m.hasMemory {
		return &Error{Section: "memory", Reason: "the module defines no memory", kind: ErrUnsupported}
	}
	if m.exports[ExportName] {
		return &Error{Section: "export", Offset: m.secs[m.sectionIndex[secExport]].start, Reason: "the module already exports " + ExportName, kind: ErrAdapted}
	}
	return nil
}
