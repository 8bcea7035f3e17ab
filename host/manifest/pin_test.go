package manifest

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const newSum = "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"

// capsuleHead is a [capsule] table without sha256; the tests add it.
const capsuleHead = "# a capsule\n[capsule]\nname = \"x\"\nversion = \"1.0.0\"\nmodule = \"x.wasm\"\n"

const rest = "\n[capabilities]\nexec = [\"/bin/sh\"] # one\n"

func TestPinRewrite(t *testing.T) {
	tests := []struct {
		name, src, want string
		line            int
		old             string
		inserted        bool
	}{
		{"plain", capsuleHead + `sha256 = "` + sum + `"` + "\n" + rest,
			capsuleHead + `sha256 = "` + newSum + `"` + "\n" + rest, 6, sum, false},
		{"trailing comment kept", capsuleHead + `sha256   =   "` + sum + `"   # pinned by hand "x"` + "\n" + rest,
			capsuleHead + `sha256   =   "` + newSum + `"   # pinned by hand "x"` + "\n" + rest, 6, sum, false},
		{"literal string", capsuleHead + `sha256 = '` + sum + `'` + "\n",
			capsuleHead + `sha256 = '` + newSum + `'` + "\n", 6, sum, false},
		{"empty placeholder", capsuleHead + `sha256 = ""` + "\n", capsuleHead + `sha256 = "` + newSum + `"` + "\n", 6, "", false},
		{"TODO placeholder", capsuleHead + `sha256 = "TODO" # fill in` + "\n", capsuleHead + `sha256 = "` + newSum + `" # fill in` + "\n", 6, "TODO", false},
		{"escaped digits", capsuleHead + `sha256 = "\u0030` + sum[1:] + `"` + "\n", capsuleHead + `sha256 = "` + newSum + `"` + "\n", 6, sum, false},
		{"quoted key", capsuleHead + `"sha256" = "` + sum + `"` + "\n", capsuleHead + `"sha256" = "` + newSum + `"` + "\n", 6, sum, false},
		{"crlf", strings.ReplaceAll(capsuleHead+`sha256 = "`+sum+`"`+"\n"+rest, "\n", "\r\n"),
			strings.ReplaceAll(capsuleHead+`sha256 = "`+newSum+`"`+"\n"+rest, "\n", "\r\n"), 6, sum, false},
		{"before module", "[capsule]\nsha256 = \"" + sum + "\"\nname = \"x\"\nversion = \"1.0.0\"\nmodule = \"x.wasm\"\n",
			"[capsule]\nsha256 = \"" + newSum + "\"\nname = \"x\"\nversion = \"1.0.0\"\nmodule = \"x.wasm\"\n", 2, sum, false},
		{"dotted at the root", "capsule.name = \"x\"\ncapsule.version = \"1.0.0\"\ncapsule.module = \"x.wasm\"\ncapsule.sha256 = \"" + sum + "\"\n",
			"capsule.name = \"x\"\ncapsule.version = \"1.0.0\"\ncapsule.module = \"x.wasm\"\ncapsule.sha256 = \"" + newSum + "\"\n", 4, sum, false},
		{"inline table, a look-alike in a string first", `capsule = { description = "sha256 = '` + sum + `'", name = "x", version = "1.0.0", module = "x.wasm", sha256 = "` + sum + `" }` + "\n",
			`capsule = { description = "sha256 = '` + sum + `'", name = "x", version = "1.0.0", module = "x.wasm", sha256 = "` + newSum + `" }` + "\n", 1, sum, false},
		{"missing: inserted after module", capsuleHead + "description = \"d\"\n" + rest,
			capsuleHead + `sha256 = "` + newSum + `"` + "\ndescription = \"d\"\n" + rest, 6, "", true},
		{"missing: indentation and comment of module", "[capsule]\n  name = \"x\"\n  version = \"1.0.0\"\n  module = \"x.wasm\" # built by make\n",
			"[capsule]\n  name = \"x\"\n  version = \"1.0.0\"\n  module = \"x.wasm\" # built by make\n  sha256 = \"" + newSum + "\"\n", 5, "", true},
		{"missing: module on the last line without newline", strings.TrimSuffix(capsuleHead, "\n"),
			capsuleHead + `sha256 = "` + newSum + `"`, 6, "", true},
		{"missing: crlf", strings.ReplaceAll(capsuleHead+rest, "\n", "\r\n"),
			strings.ReplaceAll(capsuleHead+`sha256 = "`+newSum+`"`+"\n"+rest, "\n", "\r\n"), 6, "", true},
		{"missing: dotted at the root", "capsule.name = \"x\"\ncapsule.version = \"1.0.0\"\ncapsule.module = \"x.wasm\"\n[pool]\nmax = 2\n",
			"capsule.name = \"x\"\ncapsule.version = \"1.0.0\"\ncapsule.module = \"x.wasm\"\ncapsule.sha256 = \"" + newSum + "\"\n[pool]\nmax = 2\n", 4, "", true},
		{"missing: module is multi-line, so after the header", "[capsule]\nname = \"x\"\nversion = \"1.0.0\"\nmodule = \"\"\"\nx.wasm\"\"\"\n",
			"[capsule]\nsha256 = \"" + newSum + "\"\nname = \"x\"\nversion = \"1.0.0\"\nmodule = \"\"\"\nx.wasm\"\"\"\n", 2, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Pin("C.toml", []byte(tc.src), newSum)
			if err != nil {
				t.Fatal(err)
			}
			if string(p.Text) != tc.want {
				t.Fatalf("text\n%q\nwant\n%q", p.Text, tc.want)
			}
			if p.Line != tc.line || p.Old != tc.old || p.Inserted != tc.inserted {
				t.Fatalf("line %d old %q inserted %v; want %d %q %v", p.Line, p.Old, p.Inserted, tc.line, tc.old, tc.inserted)
			}
			if m, err := Parse("C.toml", p.Text); err != nil || m.SHA256 != newSum || m.Line("capsule.sha256") != tc.line {
				t.Fatalf("the result does not parse with the new pin on line %d: %v", tc.line, err)
			}
		})
	}
}

func TestPinAlreadyPinned(t *testing.T) {
	src := []byte(capsuleHead + `sha256 = "` + newSum + `" # ok` + "\n")
	p, err := Pin("C.toml", src, newSum)
	if err != nil || string(p.Text) != string(src) || p.Old != newSum || p.Line != 6 || p.Inserted {
		t.Fatalf("%+v %v", p, err)
	}
}

// Refusals: a manifest that does not parse gets the parser's file:line
// error; a valid one whose pin cannot be rewritten in place gets
// ErrUnpinnable, the line and the line to write.
func TestPinRefuses(t *testing.T) {
	tests := []struct {
		name, src, want string
		unpinnable      bool
	}{
		{"syntax", capsuleHead + "sha256 = \"" + sum + "\n", "C.toml:6: TOML syntax", false},
		{"unknown key", capsuleHead + "sha256 = \"" + sum + "\"\nmodul = \"y\"\n", "C.toml:7: capsule.modul: unknown key", false},
		{"escaping module", strings.Replace(capsuleHead, "x.wasm", "../x.wasm", 1), `C.toml:5: capsule.module: "../x.wasm" leaves the capsule directory`, false},
		{"pin not a string", capsuleHead + "sha256 = 5\n", "C.toml:6: capsule.sha256: expected a string, got integer", false},
		{"no capsule table", "[pool]\nmax = 1\n", "C.toml: capsule: missing required key", false},
		{"multi-line pin", capsuleHead + "sha256 = \"\"\"\n" + sum + "\"\"\"\n", `C.toml:6: capsule.sha256: the pin is not written as sha256 = "…" on one line, so it cannot be rewritten in place; write that line as sha256 = "` + newSum + `"`, true},
		{"missing in an inline table", `capsule = { name = "x", version = "1.0.0", module = "x.wasm" }` + "\n",
			`C.toml:1: capsule.sha256: no sha256 key, and none could be added after module; add the line sha256 = "` + newSum + `" to [capsule]`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Pin("C.toml", []byte(tc.src), newSum)
			if err == nil {
				t.Fatalf("pinned:\n%s", p.Text)
			}
			var me *Error
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &me) || errors.Is(err, ErrUnpinnable) != tc.unpinnable {
				t.Errorf("%v: ErrInvalid %v, *Error %v, ErrUnpinnable %v (want %v)", err, errors.Is(err, ErrInvalid), me != nil, errors.Is(err, ErrUnpinnable), tc.unpinnable)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error\n  %s\nwant prefix\n  %s", err, tc.want)
			}
		})
	}
	if _, err := Pin("C.toml", []byte(capsuleHead), "ABC"); err == nil {
		t.Fatal("a sum that is not a digest was accepted")
	}
}

// For any text, Pin either refuses or changes the sha256 value alone:
// the strict parse of the result equals the lenient parse of the input
// with only the pin replaced, and the bytes differ in one line's value
// (or in one added line).
func FuzzPin(f *testing.F) {
	for _, s := range []string{
		good,
		capsuleHead,
		capsuleHead + `sha256 = "TODO" # x` + "\n" + rest,
		strings.ReplaceAll(capsuleHead+rest, "\n", "\r\n"),
		`capsule = { description = "sha256 = '` + sum + `'", name = "x", version = "1.0.0", module = "x.wasm", sha256 = "` + sum + `" }`,
		"capsule.name = \"x\"\ncapsule.version = \"1.0.0\"\ncapsule.module = \"x.wasm\"\n",
		capsuleHead + "sha256 = '''\n" + sum + "'''\n",
		capsuleHead + `sha256 = "\"` + sum[2:] + `"` + "\n",
	} {
		f.Add(s, byte(0xab))
	}
	f.Fuzz(func(t *testing.T, src string, b byte) {
		digest := strings.Repeat(string("0123456789abcdef"[b>>4])+string("0123456789abcdef"[b&15]), 32)
		before, errBefore := ParseUnpinned("C.toml", []byte(src))
		p, err := Pin("C.toml", []byte(src), digest)
		if err != nil {
			if errBefore == nil && !errors.Is(err, ErrUnpinnable) {
				t.Fatalf("a manifest that parses was refused without ErrUnpinnable: %v", err)
			}
			return
		}
		if errBefore != nil {
			t.Fatalf("pinned a manifest that does not parse (%v)", errBefore)
		}
		after, err := Parse("C.toml", p.Text)
		if err != nil || after.SHA256 != digest {
			t.Fatalf("the result does not parse strictly with the pin: %v\n%q", err, p.Text)
		}
		before.SHA256, before.lines, after.lines = digest, nil, nil
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("a field other than the pin changed:\n%+v\n%+v", before, after)
		}
		removed, added := diff(src, string(p.Text))
		switch {
		case p.Inserted && (removed != "" || strings.Count(added, "\n") > 1 || !strings.Contains(string(p.Text), `sha256 = "`+digest+`"`)):
			t.Fatalf("insertion changed more than one added line: -%q +%q", removed, added)
		case !p.Inserted && (strings.Contains(removed, "\n") || strings.Trim(added, "0123456789abcdef") != ""):
			t.Fatalf("replacement changed more than the value: -%q +%q", removed, added)
		}
	})
}

// diff strips the common prefix and suffix of a and b.
func diff(a, b string) (removed, added string) {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	j := 0
	for j < len(a)-i && j < len(b)-i && a[len(a)-1-j] == b[len(b)-1-j] {
		j++
	}
	return a[i : len(a)-j], b[i : len(b)-j]
}
