package stricttoml

import (
	"maps"
	"strings"
	"testing"
	"time"
)

// Each case is valid TOML (BurntSushi accepts it) and lists where every
// key is; the shapes are the ones the two older scanners got wrong.
func TestScan(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want Lines
	}{
		{"plain", "a = 1\nb = \"x\"\n", Lines{"a": 1, "b": 2}},
		{"tables", "[t]\na = 1\n\n[t.u]\nb = 2\n", Lines{"t": 1, "t.a": 2, "t.u": 4, "t.u.b": 5}},
		{"header spaces and comment", "[ t . u ] # c [x]\na = 1\n", Lines{"t.u": 1, "t.u.a": 2}},
		{"array of tables", "[[bin]]\nname = \"a\"\n[[bin]]\npath = \"b\"\n", Lines{"bin": 1, "bin.name": 2, "bin.path": 4}},
		{"dotted keys", "a.b = 1\na . c = 2\n", Lines{"a.b": 1, "a.c": 2}},
		{"quoted keys", "[imports]\n\"capsule:process\" = \"1.1\"\n'a.b' = 1\n\"q\\\"x\" = 2\n\"bare\" = 3\n",
			Lines{"imports": 1, `imports."capsule:process"`: 2, `imports."a.b"`: 3, `imports."q\"x"`: 4, "imports.bare": 5}},
		{"quoted header", "[principals.\"a b\"]\nx = 1\n", Lines{`principals."a b"`: 1, `principals."a b".x`: 2}},
		{"comments", "# a = 1\na = 2 # b = 3\n  # [t]\nc = \"#\" # x\n", Lines{"a": 2, "c": 4}},
		{"hash in string", "a = \"x # [t]\"\nb = 'y # z'\n", Lines{"a": 1, "b": 2}},
		{"multi-line basic", "s = \"\"\"\n[not]\nk = 1\n\"\"\"\nb = 2\n", Lines{"s": 1, "b": 5}},
		{"multi-line literal", "s = '''\nk = 1\n'''\nb = 2\n", Lines{"s": 1, "b": 4}},
		{"multi-line escapes", "s = \"\"\"a \\\"\"\" \\\n k = 1\"\"\"\nb = 2\n", Lines{"s": 1, "b": 3}},
		{"quotes inside closing", "s = \"\"\"x\"\"\"\"\nb = 2\n", Lines{"s": 1, "b": 2}},
		{"bracket in string", "a = \"x[\"\nb = 2\n", Lines{"a": 1, "b": 2}},
		{"multi-line array", "exec = [\n  \"/bin/sh\", # [\n  \"]\",\n]\nb = 2\n", Lines{"exec": 1, "b": 5}},
		{"bracket in array comment", "exec = [ # [\n  \"a\",\n]\nb = 2\n", Lines{"exec": 1, "b": 4}},
		{"bracket in quoted header", "[p.\"a]b\"]\nx = 1\n", Lines{`p."a]b"`: 1, `p."a]b".x`: 2}},
		{"nested arrays", "a = [[1, 2],\n [3]]\nb = 2\n", Lines{"a": 1, "b": 3}},
		{"inline table", "p = { x = 1, y = { z = \"}\" } }\nb = 2\n", Lines{"p": 1, "p.x": 1, "p.y": 1, "p.y.z": 1, "b": 2}},
		{"inline tables in array", "[t]\na = [\n  { x = 1 },\n  { y = 2 },\n]\n", Lines{"t": 1, "t.a": 2, "t.a.x": 3, "t.a.y": 4}},
		{"first definition wins", "[t]\na = 1\n[[u]]\nb = 1\n[[u]]\nb = 2\n", Lines{"t": 1, "t.a": 2, "u": 3, "u.b": 4}},
		{"values", "d = 1979-05-27 07:32:00Z\nf = -1.5e3\nok = true\n", Lines{"d": 1, "f": 2, "ok": 3}},
		{"crlf", "[t]\r\na = 1\r\n", Lines{"t": 1, "t.a": 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tree map[string]any
			if _, p := decode(tc.src, &tree, false); p != nil {
				t.Fatalf("fixture is not valid TOML: %+v", p)
			}
			if got := Scan(tc.src); !maps.Equal(got, tc.want) {
				t.Fatalf("Scan\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestFind(t *testing.T) {
	l := Lines{"t": 1, "t.a": 2, "u.x": 5, "u.y": 4}
	tests := []struct {
		key  string
		want int
	}{
		{"t.a", 2},   // exact
		{"t", 1},     // header
		{"t.b", 1},   // missing key: its table
		{"t.b.c", 1}, // longest defined prefix
		{"t.a.b", 2}, // prefix t.a
		{"u", 4},     // defined only by children: the first of them
		{"u.x.y", 5}, // prefix u.x
		{"u.z", 0},   // u has no line of its own and u.z no children
		{"tt", 0},    // "t" is not a prefix of "tt"
		{"nope", 0},  // nothing
		{"", 0},      // empty
		{"t.", 1},    // odd key still terminates
	}
	for _, tc := range tests {
		if got := l.Find(tc.key); got != tc.want {
			t.Errorf("Find(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

type conf struct {
	Engine string `toml:"engine"`
	Quotas struct {
		Max int `toml:"max"`
	} `toml:"quotas"`
	Principals map[string]struct {
		Tokens []string `toml:"tokens"`
	} `toml:"principals"`
	Wait time.Duration `toml:"wait"`
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want *Problem
	}{
		{"ok", "engine = \"w\"\n[quotas]\nmax = 3\n", nil},
		{"unknown top", "engine = \"w\"\nengin = \"x\"\n", &Problem{Line: 2, Key: "engin", Msg: "unknown key"}},
		{"unknown nested", "[quotas]\nmax = 1\n\nmix = 2\n", &Problem{Line: 4, Key: "quotas.mix", Msg: "unknown key"}},
		{"unknown in quoted table", "[principals.\"a b\"]\ntokens = []\ntoken = 1\n", &Problem{Line: 3, Key: `principals."a b".token`, Msg: "unknown key"}},
		{"unknown in inline table", "quotas = { max = 1,\n  mux = 2 }\n", &Problem{Line: 2, Key: "quotas.mux", Msg: "unknown key"}},
		{"wrong type", "[quotas]\nmax = \"eight\"\n", &Problem{Line: 2, Key: "quotas.max"}},
		{"syntax", "engine = \n", &Problem{Syntax: true, Line: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c conf
			_, got := Decode(tc.src, &c)
			switch {
			case tc.want == nil && got == nil:
				return
			case tc.want == nil || got == nil:
				t.Fatalf("problem %+v, want %+v", got, tc.want)
			}
			if got.Syntax != tc.want.Syntax || got.Line != tc.want.Line || (tc.want.Key != "" && got.Key != tc.want.Key) ||
				!strings.Contains(got.Msg, tc.want.Msg) || got.Msg == "" {
				t.Fatalf("problem %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeTreeKeepsEveryKey(t *testing.T) {
	tree, lines, p := DecodeTree("[capsule]\nname = \"x\"\n[extras]\na = 1\n")
	if p != nil {
		t.Fatal(p)
	}
	if _, ok := tree["extras"]; !ok || lines["extras.a"] != 4 {
		t.Fatalf("tree %v lines %v", tree, lines)
	}
}

func TestKeyAndJoin(t *testing.T) {
	if got := Key("principals", "a b", "x"); got != `principals."a b".x` {
		t.Fatal(got)
	}
	if got := Join("", "capsule:process"); got != `"capsule:process"` {
		t.Fatal(got)
	}
	if got := Join("imports", "capsule:process"); got != `imports."capsule:process"` {
		t.Fatal(got)
	}
}

// Scan terminates and never panics on arbitrary input.
func FuzzScan(f *testing.F) {
	f.Add("[t]\na = [\n{ x = \"\"\"\n\"\"\" }]\n")
	f.Add("a = '''\n")
	f.Add("[[\n\"")
	f.Fuzz(func(t *testing.T, src string) {
		for k, n := range Scan(src) {
			if n < 1 || n > strings.Count(src, "\n")+1 {
				t.Fatalf("key %q on line %d of a %d-line source", k, n, strings.Count(src, "\n")+1)
			}
		}
	})
}
