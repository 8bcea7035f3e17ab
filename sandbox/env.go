package sandbox

import (
	"fmt"
	"strings"
)

// Env limits enforced by BuildEnv.
const (
	MaxEnvEntries    = 256
	MaxEnvValueBytes = 64 << 10
	maxEnvKeyBytes   = 256
)

// envAllow are the host variables a process may inherit: enough for tools
// to find programs, pick a locale and a time zone, and draw a terminal.
// Nothing else of the host's environment (credentials above all) leaks.
var envAllow = map[string]bool{"PATH": true, "LANG": true, "TZ": true, "HOME": true, "TERM": true}

// envDenyExact and envDenyPrefix are keys that make a program load code
// or startup files, run helpers or change how it parses its input, chosen
// by whoever sets them: shells (SHELLOPTS turns on xtrace, PS4 is expanded
// on every traced line, IFS and CDPATH change what a script reads and
// where it goes), interpreters (PERL5OPT, PYTHONSTARTUP, NODE_OPTIONS...)
// and git (GIT_SSH_COMMAND, GIT_CONFIG_* run programs). The last lines are
// glibc's own list of variables it ignores in privileged programs (locale,
// resolver and allocator files, tunables): a sandbox wrapper (bwrap) runs
// on the host with this environment before it confines anything.
var envDenyExact = map[string]bool{
	"BASH_ENV": true, "ENV": true, "SHELLOPTS": true, "BASHOPTS": true, "PS4": true, "PROMPT_COMMAND": true,
	"IFS": true, "CDPATH": true, "GLOBIGNORE": true, "ZDOTDIR": true,
	"PERL5OPT": true, "PERL5LIB": true, "PERLLIB": true, "PERL5DB": true,
	"PYTHONPATH": true, "PYTHONHOME": true, "PYTHONSTARTUP": true,
	"RUBYOPT": true, "RUBYLIB": true, "NODE_OPTIONS": true, "NODE_PATH": true,
	"JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true, "JDK_JAVA_OPTIONS": true,
	"GIT_EXEC_PATH": true, "GIT_SSH": true, "GIT_SSH_COMMAND": true, "GIT_ASKPASS": true, "SSH_ASKPASS": true,
	"GIT_EDITOR": true, "GIT_SEQUENCE_EDITOR": true, "GIT_PAGER": true, "GIT_PROXY_COMMAND": true, "GIT_EXTERNAL_DIFF": true,
	"GCONV_PATH": true, "GLIBC_TUNABLES": true, "LOCPATH": true, "NLSPATH": true, "HOSTALIASES": true, "LOCALDOMAIN": true,
	"RES_OPTIONS": true, "RESOLV_HOST_CONF": true, "NIS_PATH": true, "MALLOC_TRACE": true, "GETCONF_DIR": true,
}
var envDenyPrefix = []string{"LD_", "DYLD_", "GIT_CONFIG"}

// envHostOnly are keys only the host sets (from Config.HostEnv): PATH
// decides which file a bare name runs, both in the exec check and when an
// allowed program (git, make, a shell script) runs its helpers, so a
// guest's PATH would steer an allowed program into the workspace.
var envHostOnly = map[string]bool{"PATH": true}

// EnvError is a refused environment entry; errors.Is(err, ErrInvalidEnv).
type EnvError struct {
	// Key is the variable refused (truncated when it is not a valid key).
	Key    string
	Reason string
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("env key %q %s: %v", e.Key, e.Reason, ErrInvalidEnv)
}

func (e *EnvError) Unwrap() error { return ErrInvalidEnv }

// BuildEnv returns the final environment of a process: the allowlisted
// entries of base (PATH, LANG, LC_*, TZ, HOME, TERM; the caller passes the
// host environment explicitly, nothing is read from os.Environ here), then
// caller's KEY=VALUE entries, which override base. Caller entries with a
// host-only key (PATH: the host's, from base, or none), a reserved key
// (LD_*, DYLD_*, GIT_CONFIG*, shell and interpreter startup variables such
// as BASH_ENV, SHELLOPTS, PS4, IFS, PERL5OPT, PYTHONSTARTUP, NODE_OPTIONS,
// git's helper commands, and glibc's privileged-mode list: GLIBC_TUNABLES,
// LOCPATH, ...), a key that is not [A-Za-z_][A-Za-z0-9_]*, a duplicate
// key, a NUL in the value, a value over 64 KiB, or more than 256 entries in
// total are refused with an *EnvError (ErrInvalidEnv) that names the key.
func BuildEnv(base, caller []string) ([]string, error) {
	out := make([]string, 0, len(caller)+8)
	idx := map[string]int{}
	for _, kv := range base {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !envAllowed(k) || validEnvKey(k) != nil || strings.IndexByte(kv, 0) >= 0 {
			continue
		}
		if i, dup := idx[k]; dup {
			out[i] = kv // last one wins, as in getenv(3)
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	seen := map[string]bool{}
	for _, kv := range caller {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, &EnvError{Key: truncate(kv), Reason: "has no '='"}
		}
		if err := CheckEnvEntry(k, v); err != nil {
			return nil, err
		}
		if seen[k] {
			return nil, &EnvError{Key: k, Reason: "given twice"}
		}
		seen[k] = true
		if i, dup := idx[k]; dup {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	if len(out) > MaxEnvEntries {
		return nil, fmt.Errorf("env has %d entries, more than %d: %w", len(out), MaxEnvEntries, ErrInvalidEnv)
	}
	return out, nil
}

// CheckEnvEntry validates one caller-supplied entry (see BuildEnv).
func CheckEnvEntry(key, value string) error {
	if err := validEnvKey(key); err != nil {
		return err
	}
	if envHostOnly[key] {
		return &EnvError{Key: key, Reason: "is set by the host, not by a caller (it decides which programs run)"}
	}
	if envReserved(key) {
		return &EnvError{Key: key, Reason: "is reserved (it makes programs load code or run helpers)"}
	}
	if strings.IndexByte(value, 0) >= 0 {
		return &EnvError{Key: key, Reason: "has a value containing NUL"}
	}
	if len(value) > MaxEnvValueBytes {
		return &EnvError{Key: key, Reason: fmt.Sprintf("has a value of %d bytes, more than %d", len(value), MaxEnvValueBytes)}
	}
	return nil
}

func envAllowed(k string) bool { return envAllow[k] || strings.HasPrefix(k, "LC_") }

func envReserved(k string) bool {
	if envDenyExact[k] {
		return true
	}
	for _, p := range envDenyPrefix {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

func validEnvKey(k string) error {
	if k == "" {
		return &EnvError{Reason: "is empty"}
	}
	if len(k) > maxEnvKeyBytes {
		return &EnvError{Key: k[:32] + "...", Reason: fmt.Sprintf("is longer than %d bytes", maxEnvKeyBytes)}
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return &EnvError{Key: truncate(k), Reason: "is not [A-Za-z_][A-Za-z0-9_]*"}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
