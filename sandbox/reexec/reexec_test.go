package reexec

import (
	"os"
	"strings"
	"testing"
)

func init() {
	Register("reexec-test-echo", func(args []string) int {
		os.Stdout.WriteString(strings.Join(args, ","))
		return 7
	})
}

func TestMain(m *testing.M) {
	if Init() {
		return
	}
	os.Exit(m.Run())
}

func TestCommandRunsRole(t *testing.T) {
	out, err := Command("reexec-test-echo", "a", "b").Output()
	if string(out) != "a,b" {
		t.Fatalf("output %q, want a,b", out)
	}
	ee, ok := err.(interface{ ExitCode() int })
	if !ok || ee.ExitCode() != 7 {
		t.Fatalf("err = %v, want exit 7", err)
	}
	if !Registered("reexec-test-echo") || Registered("nope") {
		t.Fatal("Registered is wrong")
	}
}

func TestRegisterRefusesDuplicates(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("duplicate Register did not panic")
		}
	}()
	Register("reexec-test-echo", func([]string) int { return 0 })
}
