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
// or startup files chosen by whoever sets them. The second line is glibc's
// own list of variables it ignores in privileged programs (locale, resolver
// and allocator files, tunables): a sandbox wrapper (bwrap) runs on the host
// with this environment before it confines anything.
var envDenyExact = map[string]bool{
	"BASH_ENV": true, "ENV": true, "PYTHONPATH": true, "PYTHONHOME": true,
	"NODE_OPTIONS": true, "PERL5OPT": true, "RUBYOPT": true, "GCONV_PATH": true, "ZDOTDIR": true,
	"GLIBC_TUNABLES": true, "LOCPATH": true, "NLSPATH": true, "HOSTALIASES": true, "LOCALDOMAIN": true,
	"RES_OPTIONS": true, "RESOLV_HOST_CONF": true, "NIS_PATH": true, "MALLOC_TRACE": true, "GETCONF_DIR": true,
}
var envDenyPrefix = []string{"LD_", "DYLD_"}

// BuildEnv returns the final environment of a process: the allowlisted
// entries of base (PATH, LANG, LC_*, TZ, HOME, TERM; the caller passes the
// host environment explicitly, nothing is read from os.Environ here), then
// caller's KEY=VALUE entries, which override base. Caller entries with a
// reserved key (LD_*, DYLD_*, BASH_ENV, ENV, PYTHONPATH, PYTHONHOME,
// NODE_OPTIONS, PERL5OPT, RUBYOPT, GCONV_PATH, ZDOTDIR, and glibc's
// privileged-mode list: GLIBC_TUNABLES, LOCPATH, ...), a key that is not
// [A-Za-z_][A-Za-z0-9_]*, a duplicate key, a NUL in the value, a value over
// 64 KiB, or more than 256 entries in total are refused with an error
// wrapping ErrInvalidEnv that names the key.
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
			return nil, fmt.Errorf("env entry %q has no '=': %w", truncate(kv), ErrInvalidEnv)
		}
		if err := CheckEnvEntry(k, v); err != nil {
			return nil, err
		}
		if seen[k] {
			return nil, fmt.Errorf("env key %q given twice: %w", k, ErrInvalidEnv)
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
	if envReserved(key) {
		return fmt.Errorf("env key %q is reserved: %w", key, ErrInvalidEnv)
	}
	if strings.IndexByte(value, 0) >= 0 {
		return fmt.Errorf("env key %q: value contains NUL: %w", key, ErrInvalidEnv)
	}
	if len(value) > MaxEnvValueBytes {
		return fmt.Errorf("env key %q: value is %d bytes, more than %d: %w", key, len(value), MaxEnvValueBytes, ErrInvalidEnv)
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
		return fmt.Errorf("env key is empty: %w", ErrInvalidEnv)
	}
	if len(k) > maxEnvKeyBytes {
		return fmt.Errorf("env key %q... is longer than %d bytes: %w", k[:32], maxEnvKeyBytes, ErrInvalidEnv)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return fmt.Errorf("env key %q is not [A-Za-z_][A-Za-z0-9_]*: %w", truncate(k), ErrInvalidEnv)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
