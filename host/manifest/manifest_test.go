package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

const good = `# a capsule
[capsule]
name = "dev-tools"
version = "1.2.3"
module = "dev.wasm"
sha256 = "` + sum + `"

[imports]
"capsule:process" = "1.1"

[capabilities]
exec = [
  "/bin/sh",
  "python3",
]
allow_persistent = true
backend = "bwrap"
network = false

[limits]
max_concurrent = 4
max_cpu_ms = 1500

[pool]
min_idle = 2
max = 6
idle_ttl = "90s"
memory_bytes = 8388608
`

func TestParseGood(t *testing.T) {
	m, err := Parse("/caps/dev/Capsule.toml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "dev-tools" || m.Version != "1.2.3" || m.Module != "dev.wasm" || m.SHA256 != sum {
		t.Fatalf("capsule: %+v", m)
	}
	if m.Imports["capsule:process"] != "1.1" {
		t.Fatalf("imports: %v", m.Imports)
	}
	c := m.Capabilities
	if len(c.Exec) != 2 || c.Exec[1] != "python3" || !c.AllowPersistent || c.Backend != "bwrap" || c.Network {
		t.Fatalf("caps: %+v", c)
	}
	if m.Limits.MaxConcurrent != 4 || m.Limits.MaxCPU != 1500*time.Millisecond || m.Limits.MaxPids != 0 {
		t.Fatalf("limits: %+v", m.Limits)
	}
	if m.Pool != (Pool{MinIdle: 2, Max: 6, IdleTTL: 90 * time.Second, MemoryBytes: 8 << 20}) {
		t.Fatalf("pool: %+v", m.Pool)
	}
	if m.Dir != "/caps/dev" {
		t.Fatalf("dir %q", m.Dir)
	}
	if got := m.Line("limits.max_cpu_ms"); got != 22 {
		t.Fatalf("line of limits.max_cpu_ms = %d", got)
	}
	if got := m.Line(`imports."capsule:process"`); got != 9 {
		t.Fatalf("line of import = %d", got)
	}
}

func TestDefaults(t *testing.T) {
	m, err := Parse("C.toml", []byte(`[capsule]
name = "a"
version = "0.1.0"
module = "sub/a.wasm"
sha256 = "`+sum+`"
`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Capabilities.Backend != "local" || m.Pool != (Pool{MinIdle: DefaultMinIdle, Max: DefaultMax, IdleTTL: DefaultIdleTTL}) || len(m.Imports) != 0 {
		t.Fatalf("%+v", m)
	}
}

// Every bad manifest names file:line: key. The header occupies lines 1-5.
func TestBad(t *testing.T) {
	header := func(name, version, module, sha string) string {
		return "[capsule]\nname = " + name + "\nversion = " + version + "\nmodule = " + module + "\nsha256 = " + sha + "\n"
	}
	ok := header(`"x"`, `"1.0.0"`, `"x.wasm"`, `"`+sum+`"`)
	tests := []struct {
		name, src, want string
	}{
		{"unknown top table", ok + "[extras]\na = 1\n", `C.toml:6: extras: unknown key`},
		{"unknown capsule key", ok + "nmae = \"y\"\n", `C.toml:6: capsule.nmae: unknown key (known: description, module, name, sha256, version)`},
		{"typo in capabilities", ok + "[capabilities]\nalow_persistent = true\n", `C.toml:7: capabilities.alow_persistent: unknown key`},
		{"missing name", "[capsule]\nversion = \"1.0.0\"\nmodule = \"x.wasm\"\nsha256 = \"" + sum + "\"\n", `C.toml:1: capsule.name: missing required key in [capsule]`},
		{"missing capsule", "[pool]\nmax = 1\n", `C.toml: capsule: missing required key`},
		{"missing sha", "[capsule]\nname = \"x\"\nversion = \"1.0.0\"\nmodule = \"x.wasm\"\n", `C.toml:1: capsule.sha256: missing required key`},
		{"bad name", header(`"X_y"`, `"1.0.0"`, `"x.wasm"`, `"`+sum+`"`), `C.toml:2: capsule.name: "X_y" is not a valid capsule name`},
		{"name wrong type", header(`7`, `"1.0.0"`, `"x.wasm"`, `"`+sum+`"`), `C.toml:2: capsule.name: expected a string, got integer`},
		{"bad version", header(`"x"`, `"1.0"`, `"x.wasm"`, `"`+sum+`"`), `C.toml:3: capsule.version: "1.0" is not a semantic version`},
		{"absolute module", header(`"x"`, `"1.0.0"`, `"/etc/x.wasm"`, `"`+sum+`"`), `C.toml:4: capsule.module: "/etc/x.wasm" must be a relative path`},
		{"escaping module", header(`"x"`, `"1.0.0"`, `"a/../../x.wasm"`, `"`+sum+`"`), `C.toml:4: capsule.module: "a/../../x.wasm" leaves the capsule directory`},
		{"bad sha", header(`"x"`, `"1.0.0"`, `"x.wasm"`, `"ABC"`), `C.toml:5: capsule.sha256: "ABC" is not 64 lowercase hex digits`},
		{"import bad pkg", ok + "[imports]\nprocess = \"1.1\"\n", `C.toml:7: imports.process: "process" is not a WIT package name`},
		{"import bad version", ok + "[imports]\n\"capsule:process\" = \"v1\"\n", `C.toml:7: imports."capsule:process": "v1" is not a contract version`},
		{"import wrong type", ok + "[imports]\n\"capsule:process\" = 1.1\n", `C.toml:7: imports."capsule:process": expected a version string, got float`},
		{"exec not array", ok + "[capabilities]\nexec = \"/bin/sh\"\n", `C.toml:7: capabilities.exec: expected an array of strings, got string`},
		{"exec element type", ok + "[capabilities]\nexec = [\n  \"/bin/sh\",\n  3,\n]\n", `C.toml:7: capabilities.exec: element 1: expected a string, got integer`},
		{"exec relative", ok + "[capabilities]\nexec = [\"bin/sh\"]\n", `C.toml:7: capabilities.exec: element 0: "bin/sh" must be a bare name or an absolute path`},
		{"exec duplicate", ok + "[capabilities]\nexec = [\"sh\", \"sh\"]\n", `C.toml:7: capabilities.exec: element 1: "sh" listed twice`},
		{"persistent wrong type", ok + "[capabilities]\nallow_persistent = \"yes\"\n", `C.toml:7: capabilities.allow_persistent: expected a boolean, got string`},
		{"bad backend", ok + "[capabilities]\nbackend = \"docker\"\n", `C.toml:7: capabilities.backend: "docker" is not a backend (local, bwrap, oci)`},
		{"profile without oci", ok + "[capabilities]\nprofile = \"runsc\"\n", `C.toml:7: capabilities.profile: a launch profile needs backend = "oci"`},
		{"limit wrong type", ok + "[limits]\n\nmax_pids = \"10\"\n", `C.toml:8: limits.max_pids: expected an integer, got string`},
		{"limit zero", ok + "[limits]\nmax_concurrent = 0\n", `C.toml:7: limits.max_concurrent: 0 is out of range [1, 1048576]`},
		{"limit unknown", ok + "[limits]\nmax_memory = 10\n", `C.toml:7: limits.max_memory: unknown key`},
		{"pool ttl int", ok + "[pool]\nidle_ttl = 30\n", `C.toml:7: pool.idle_ttl: expected a duration string`},
		{"pool ttl bad", ok + "[pool]\nidle_ttl = \"forever\"\n", `C.toml:7: pool.idle_ttl: "forever" is not a duration between 1s and 24h`},
		{"pool min over max", ok + "[pool]\nmin_idle = 5\nmax = 2\n", `C.toml:7: pool.min_idle: 5 exceeds pool.max 2`},
		{"pool share over max", ok + "[pool]\nmax = 2\nmax_per_principal = 3\n", `C.toml:8: pool.max_per_principal: 3 exceeds pool.max 2`},
		{"output rate zero", ok + "[limits]\nmax_output_bytes_per_sec = 0\n", `C.toml:7: limits.max_output_bytes_per_sec: 0 is out of range`},
		{"pool max too big", ok + "[pool]\nmax = 100000\n", `C.toml:7: pool.max: 100000 is out of range [1, 1024]`},
		{"pool memory not a page multiple", ok + "[pool]\nmemory_bytes = 100000\n", `C.toml:7: pool.memory_bytes: 100000 is not a multiple of 65536 (the wasm page) in [65536, 4294901760]`},
		{"pool memory 4 GiB", ok + "[pool]\nmemory_bytes = 4294967296\n", `C.toml:7: pool.memory_bytes: 4294967296 is not a multiple`},
		{"pool memory type", ok + "[pool]\nmemory_bytes = \"256MiB\"\n", `C.toml:7: pool.memory_bytes: expected an integer, got string`},
		{"limits not table", "limits = 3\n" + ok, `C.toml:1: limits: expected a table, got integer`},
		{"syntax", ok + "[pool\n", `C.toml:7: TOML syntax: `},
		{"syntax in value", ok + "[pool]\nmax = = 3\n", `C.toml:7: TOML syntax: `},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("C.toml", []byte(tc.src))
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v is not ErrInvalid", err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error\n  %s\nwant prefix\n  %s", err, tc.want)
			}
		})
	}
}

func TestModulePathSymlinkEscape(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "evil.wasm")
	if err := os.WriteFile(outside, []byte("\x00asm"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "x.wasm")); err != nil {
		t.Fatal(err)
	}
	src := "[capsule]\nname = \"x\"\nversion = \"1.0.0\"\nmodule = \"x.wasm\"\nsha256 = \"" + sum + "\"\n"
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.ModulePath()
	if err == nil || !strings.Contains(err.Error(), "Capsule.toml:4: capsule.module:") || !strings.Contains(err.Error(), "outside the capsule directory") {
		t.Fatalf("got %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(good)
	f.Add("[capsule]\nname = 1\n")
	f.Fuzz(func(t *testing.T, src string) {
		m, err := Parse("C.toml", []byte(src))
		if err == nil && (m.Name == "" || m.Pool.Max < m.Pool.MinIdle) {
			t.Fatalf("accepted invalid manifest: %+v", m)
		}
	})
}
