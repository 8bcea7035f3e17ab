package sandbox

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// CheckProfile: every limit can be lowered, never raised; the network
// only where the profile grants it; an unknown or missing profile is its
// own class. Each refusal names the limit and both values.
func TestCheckProfile(t *testing.T) {
	ceil := Limits{MemoryBytes: 64 << 20, CPUTime: 2 * time.Second, Pids: 64, OpenFiles: 256}
	profiles := map[string]Profile{
		"tight": {Limits: ceil, NetworkMode: "none"},
		"net":   {Limits: Limits{MemoryBytes: 1 << 20}, Network: true, NetworkMode: "host"},
		"open":  {},
	}
	tests := []struct {
		name, profile string
		want          Limits
		network       bool
		got           Limits
		class         error
		widens        *WidensError
	}{
		{name: "zero takes the ceilings", profile: "tight", got: ceil},
		{name: "lower wins", profile: "tight", want: Limits{MemoryBytes: 1 << 20, Pids: 8, OpenFiles: 16, CPUTime: time.Second},
			got: Limits{MemoryBytes: 1 << 20, Pids: 8, OpenFiles: 16, CPUTime: time.Second}},
		{name: "equal fits", profile: "tight", want: ceil, got: ceil},
		{name: "no ceilings", profile: "open", want: Limits{Pids: 1 << 20}, got: Limits{Pids: 1 << 20}},
		{name: "network granted", profile: "net", network: true, got: Limits{MemoryBytes: 1 << 20}},
		{name: "widen memory", profile: "tight", want: Limits{MemoryBytes: 64<<20 + 1}, class: ErrWidens,
			widens: &WidensError{Profile: "tight", Limit: LimitMemory, Want: 64<<20 + 1, Ceiling: 64 << 20}},
		{name: "widen pids", profile: "tight", want: Limits{Pids: 65}, class: ErrWidens,
			widens: &WidensError{Profile: "tight", Limit: LimitPids, Want: 65, Ceiling: 64}},
		{name: "widen open files", profile: "tight", want: Limits{OpenFiles: 1000}, class: ErrWidens,
			widens: &WidensError{Profile: "tight", Limit: LimitOpenFiles, Want: 1000, Ceiling: 256}},
		{name: "widen cpu", profile: "tight", want: Limits{CPUTime: 3 * time.Second}, class: ErrWidens,
			widens: &WidensError{Profile: "tight", Limit: LimitCPU, Want: int64(3 * time.Second), Ceiling: int64(2 * time.Second)}},
		{name: "negative", profile: "open", want: Limits{Pids: -1}, class: ErrWidens,
			widens: &WidensError{Profile: "open", Limit: LimitPids, Want: -1}},
		{name: "first widening reported", profile: "tight", want: Limits{Pids: 65, OpenFiles: 1000}, class: ErrWidens,
			widens: &WidensError{Profile: "tight", Limit: LimitPids, Want: 65, Ceiling: 64}},
		{name: "widen network", profile: "tight", network: true, class: ErrWidens,
			widens: &WidensError{Profile: "tight", Network: true}},
		{name: "network before limits", profile: "tight", network: true, want: Limits{Pids: 65}, class: ErrWidens,
			widens: &WidensError{Profile: "tight", Network: true}},
		{name: "unknown profile", profile: "nope", class: ErrUnknownProfile},
		{name: "no profile", profile: "", class: ErrUnknownProfile},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckProfile(profiles, tc.profile, tc.want, tc.network)
			if tc.class == nil {
				if err != nil || got != tc.got {
					t.Fatalf("= %+v, %v; want %+v", got, err, tc.got)
				}
				return
			}
			if !errors.Is(err, tc.class) || !errors.Is(err, ErrInvalidSpec) || got != (Limits{}) {
				t.Fatalf("= %+v, %v; want class %v", got, err, tc.class)
			}
			var we *WidensError
			switch {
			case tc.widens == nil && errors.As(err, &we):
				t.Fatalf("%v is a WidensError", err)
			case tc.widens != nil && (!errors.As(err, &we) || *we != *tc.widens):
				t.Fatalf("%#v; want %#v", err, tc.widens)
			}
		})
	}
}

func TestProfileErrorText(t *testing.T) {
	_, err := CheckProfile(map[string]Profile{"b": {}, "a": {}}, "c", Limits{}, false)
	if want := `unknown launch profile "c" (declared: a, b)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v; want %s", err, want)
	}
	_, err = CheckProfile(map[string]Profile{"p": {Limits: Limits{Pids: 4}}}, "p", Limits{Pids: 5}, false)
	if want := `request widens its launch profile: profile "p": pids 5 exceeds the profile's 4`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v; want %s", err, want)
	}
}
