//go:build !leanclient

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/capsule-host/capsule-host/host/manifest"
	"github.com/capsule-host/capsule-host/internal/atomicfile"
)

func init() {
	commands = append(commands, &command{
		name: "pin", args: "DIR", summary: "set the manifest's sha256 from the module, in place", minArgs: 1, maxArgs: 1,
		help: `Hashes the module that DIR/Capsule.toml names and writes its SHA-256 into
[capsule] sha256, changing nothing else in the file: comments, order and
spacing stay, the value is replaced between its quotes, and an absent key
is added on the line after module. It rebuilds nothing: build the module
first. The manifest is parsed as strictly as validate does (only the pin
itself may be absent or stale); problems are printed as file:line:
message. The file is replaced atomically and keeps its mode.

--check writes nothing and exits 1 when the pin is stale (for CI).`,
		flags: func(fs *flag.FlagSet, o *opts) {
			fs.BoolVar(&o.check, "check", false, "exit 1 if the pin is stale, without writing (for CI)")
		},
		run: runPin,
	})
}

// pinReport is pin's --json output.
type pinReport struct {
	Dir     string `json:"dir"`
	File    string `json:"file"`
	Capsule string `json:"capsule"`
	Module  string `json:"module"`
	Bytes   int64  `json:"bytes"`
	// Old is the pin as written before ("" when the key was absent).
	Old    string `json:"old"`
	SHA256 string `json:"sha256"`
	Line   int    `json:"line"`
	// Status: "pinned" (written), "already-pinned", "stale" (--check).
	Status   string `json:"status"`
	Inserted bool   `json:"inserted,omitempty"`
}

func runPin(e *env, o *opts, args []string) error {
	dir, err := filepath.Abs(args[0])
	if err != nil {
		return err
	}
	file := filepath.Join(dir, manifest.FileName)
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: no manifest: %s is not a capsule directory (%w)", file, args[0], err)
	}
	if err != nil {
		return err
	}
	m, err := manifest.ParseUnpinned(file, data)
	if err != nil {
		return err
	}
	rep := pinReport{Dir: dir, File: file, Capsule: m.Name, Module: m.Module, Old: m.SHA256, Line: m.Line("capsule.sha256")}
	if rep.SHA256, rep.Bytes, err = hashModule(m); err != nil {
		return err
	}
	var edit *manifest.Pinned
	switch {
	case m.SHA256 == rep.SHA256:
		rep.Status = "already-pinned"
	default:
		if edit, err = manifest.Pin(file, data, rep.SHA256); err != nil {
			return err
		}
		rep.Line, rep.Inserted, rep.Status = edit.Line, edit.Inserted, "stale"
		if !o.check {
			if err := replaceFile(file, edit.Text); err != nil {
				return err
			}
			rep.Status = "pinned"
		}
	}
	if e.g.json {
		if err := printJSON(e.stdout, rep); err != nil {
			return err
		}
	} else {
		printPin(e, &rep, args[0])
	}
	if rep.Status == "stale" {
		return &exitError{code: exitFailed}
	}
	return nil
}

// hashModule is the SHA-256 and size of the module m names, which must
// lie inside the capsule directory.
func hashModule(m *manifest.Manifest) (string, int64, error) {
	mp, err := m.ModulePath()
	if err != nil {
		return "", 0, err
	}
	f, err := os.Open(mp)
	if err != nil {
		return "", 0, m.Errorf("capsule.module", "%v", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, m.Errorf("capsule.module", "%v", err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func printPin(e *env, rep *pinReport, arg string) {
	what := fmt.Sprintf("(%s, %s)", rep.Module, humanBytes(rep.Bytes))
	from := shortPin(rep.Old)
	if rep.Inserted {
		from = "(none)"
	}
	change := fmt.Sprintf("%s: sha256 %s→%s", rep.Capsule, from, abbreviate(rep.SHA256, 4))
	if rep.Inserted {
		change += fmt.Sprintf(", added on line %d", rep.Line)
	}
	switch rep.Status {
	case "already-pinned":
		fmt.Fprintf(e.stdout, "already pinned %s: sha256 %s %s\n", rep.Capsule, abbreviate(rep.SHA256, 4), what)
	case "pinned":
		fmt.Fprintf(e.stdout, "pinned %s %s\n", change, what)
	case "stale":
		fmt.Fprintf(e.stderr, "%s:%d: stale pin %s %s\nrun: capsule-host pin %s\n", rep.File, rep.Line, change, what, shellQuote(arg))
	}
}

// shortPin shows a pin as the summary line does: a digest abbreviated,
// anything else quoted.
func shortPin(s string) string {
	if len(s) == 64 && strings.Trim(s, "0123456789abcdef") == "" {
		return abbreviate(s, 4)
	}
	return fmt.Sprintf("%q", abbreviate(s, 16))
}

// humanBytes is a size in SI units, as "4.2 MB".
func humanBytes(n int64) string {
	switch {
	case n < 1000:
		return plural(int(n), "byte", "bytes")
	case n < 1000*1000:
		return fmt.Sprintf("%.1f kB", float64(n)/1000)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/(1000*1000))
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellQuote makes a path safe to paste into a shell.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pinHint is the fix validate suggests for a stale or absent pin.
func pinHint(arg string) string { return "run: capsule-host pin " + shellQuote(arg) }

// replaceFile writes data over the file at path (through a symlink, to
// its target) atomically: a temporary file in the same directory, the old
// file's mode, fsync, rename, fsync of the directory. The owner is kept
// when it was not the caller (root pinning another user's capsule).
func replaceFile(path string, data []byte) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(real, data, fi.Mode().Perm(), atomicfile.Options{}); err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return os.Lchown(real, int(st.Uid), int(st.Gid))
	}
	return nil
}
