package journal

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCodecRoundTripsEveryField(t *testing.T) {
	for i := range 20 {
		p := sample(i)
		v, err := EncodeProcess(p)
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		got, err := DecodeProcess(p.Key[:], v)
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("sample %d:\n got %+v\nwant %+v", i, got, p)
		}
	}
	// Every field of procV1 is set by some sample (a new field that the
	// conversion forgets shows up here as always-zero).
	seen := map[string]bool{}
	for i := range 20 {
		var m map[string]any
		v, _ := EncodeProcess(sample(i))
		json.Unmarshal(v[4:], &m)
		for k, x := range m {
			if x != nil && x != false && x != float64(0) && x != "" {
				seen[k] = true
			}
		}
		if e, ok := m["exit"].(map[string]any); ok {
			for k, x := range e {
				if x != nil && x != "" {
					seen["exit."+k] = true
				}
			}
		}
	}
	for _, f := range []string{"v", "capsule", "principal", "fallback", "label", "command", "args", "backend", "backend_id", "lifetime", "mem_bytes", "cpu_ns", "pids", "open_files", "stdin", "overflow", "ring_bytes", "drain", "started_ns", "lifetime_deadline_ns", "idle_timeout_ns", "idle_deadline_ns", "exit_retention_ns", "retention_deadline_ns", "exit", "reason", "exit.code", "exit.signal", "exit.killed_for", "exit.at_ns"} {
		if !seen[f] {
			t.Errorf("no sample sets %q", f)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	p := sample(1)
	good, _ := EncodeProcess(p)
	body := string(good[4:])
	k := p.Key[:]
	edit := func(old, new string) []byte { return sealRaw(k, strings.Replace(body, old, new, 1)) }
	p3 := sample(3)
	body3 := string(mustEncode(t, p3)[4:])
	cases := []struct {
		name string
		key  []byte
		val  []byte
		want error
	}{
		{"short value", k, good[:3], ErrMalformed},
		{"flipped body byte", k, append(append([]byte{}, good[:20]...), append([]byte{good[20] ^ 1}, good[21:]...)...), ErrChecksum},
		{"another key", append([]byte{k[0] ^ 1}, k[1:]...), good, ErrChecksum},
		{"key of 31 bytes", k[:31], good, ErrMalformed},
		{"not JSON", k, sealRaw(k, "not json"), ErrMalformed},
		{"no version", k, sealRaw(k, `{"capsule":"a"}`), ErrMalformed},
		{"version 2", k, edit(`"v":1`, `"v":2`), ErrUnknownVersion},
		{"version 0", k, edit(`"v":1`, `"v":0`), ErrUnknownVersion},
		{"unknown field", k, edit(`"v":1,`, `"v":1,"extra":1,`), ErrMalformed},
		{"field in another case", k, edit(`"label"`, `"LABEL"`), ErrMalformed},
		{"duplicate field", k, edit(`"v":1,`, `"v":1,"v":1,`), ErrMalformed},
		{"whitespace", k, edit(`"v":1,`, `"v": 1,`), ErrMalformed},
		{"trailing data", k, sealRaw(k, body+" {}"), ErrMalformed},
		{"empty args as []", p3.Key[:], sealRaw(p3.Key[:], strings.Replace(body3, `"args":null`, `"args":[]`, 1)), ErrMalformed},
		{"unknown stdin mode", k, edit(`"stdin":"open"`, `"stdin":"pty"`), ErrMalformed},
		{"unknown reason", k, edit(`"reason":"self-exit"`, `"reason":"bored"`), ErrMalformed},
		{"code and signal", k, edit(`"signal":null`, `"signal":9`), ErrMalformed},
		{"negative limit", k, edit(`"pids":64`, `"pids":-1`), ErrMalformed},
		{"no start time", k, edit(`"started_ns":1700000001123456789`, `"started_ns":0`), ErrMalformed},
		{"empty backend", k, edit(`"backend":"oci"`, `"backend":""`), ErrMalformed},
		{"empty capsule", k, edit(`"capsule":"cap-1"`, `"capsule":""`), ErrMalformed},
		{"invalid UTF-8", k, edit(`"label":"job-1`, "\"label\":\"\xff"), ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeProcess(c.key, c.val)
			if !errors.Is(err, c.want) {
				t.Fatalf("DecodeProcess = %v, want %v", err, c.want)
			}
		})
	}
}

func mustEncode(t *testing.T, p Process) []byte {
	v, err := EncodeProcess(p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestEncodeRefusesInvalid(t *testing.T) {
	edits := map[string]func(*Process){
		"no start":           func(p *Process) { p.Started = time.Time{} },
		"start before 1970":  func(p *Process) { p.Started = time.Unix(-5, 0) },
		"principal with NUL": func(p *Process) { p.Owner.Principal = "a\x00b" },
		"bad lifetime":       func(p *Process) { p.Backend.Lifetime = "" },
		"bad overflow":       func(p *Process) { p.Overflow = "x" },
		"negative drain":     func(p *Process) { p.Drain[1] = -1 },
		"exit without time":  func(p *Process) { p.Exit = &Exit{} },
		"huge label":         func(p *Process) { p.Label = strings.Repeat("x", maxString+1) },
	}
	for name, edit := range edits {
		p := sample(0)
		edit(&p)
		if _, err := EncodeProcess(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: EncodeProcess = %v, want ErrInvalid", name, err)
		}
	}
}

func TestScopeAndMetaRecords(t *testing.T) {
	o := Owner{Capsule: "c", Principal: "p", Fallback: true}
	v, err := encodeScope(o, 42)
	if err != nil {
		t.Fatal(err)
	}
	if got, next, err := decodeScope(scopeKey(o), v); err != nil || got != o || next != 42 {
		t.Fatalf("decodeScope = %+v %d %v", got, next, err)
	}
	// The key must be the one the owner gives: a real principal's key
	// cannot carry a fallback scope.
	if _, _, err := decodeScope(scopeKey(Owner{Capsule: "c", Principal: "p"}), sealRaw(scopeKey(Owner{Capsule: "c", Principal: "p"}), string(v[4:]))); !errors.Is(err, ErrMalformed) {
		t.Fatalf("mismatched scope key: %v, want ErrMalformed", err)
	}
	m := meta{Format: formatVersion, Created: time.Unix(1, 2).UTC()}
	mv, _ := encodeMeta(m)
	if got, err := decodeMeta("j", mv); err != nil || got != m {
		t.Fatalf("decodeMeta = %+v %v", got, err)
	}
	newer := sealRaw([]byte(keyMeta), strings.Replace(string(mv[4:]), `"format":1`, `"format":2`, 1))
	var fe *FormatError
	if _, err := decodeMeta("j", newer); !errors.Is(err, ErrFormat) || !errors.As(err, &fe) || fe.Found != 2 {
		t.Fatalf("format 2: %v, want a FormatError", err)
	}
}
