package config

import (
	"path/filepath"
	"testing"
)

// backends.oci.init is a path like the others: relative to the file.
func TestOCIInitPath(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.toml")
	c, err := Parse(file, []byte("[backends]\nenabled = [\"oci\"]\n[backends.oci]\ninit = \"bin/capsule-oci-init\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(file), "bin", "capsule-oci-init"); c.Backends.OCI.Init != want {
		t.Fatalf("init %q, want %q", c.Backends.OCI.Init, want)
	}
	if c, err = Parse(file, []byte("")); err != nil || c.Backends.OCI.Init != "" {
		t.Fatalf("default init %q, %v (empty: the backend looks beside the binary, then in PATH)", c.Backends.OCI.Init, err)
	}
}
