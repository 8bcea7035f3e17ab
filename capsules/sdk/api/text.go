package api

import "fmt"

// The enums marshal to JSON as their WIT case names, so SDK types can be
// returned from tools as they are.

func marshalName(names []string, v int, what string) ([]byte, error) {
	if v < 0 || v >= len(names) {
		return nil, fmt.Errorf("%s %d out of range", what, v)
	}
	return []byte(names[v]), nil
}

func unmarshalName(names []string, b []byte, what string) (int, error) {
	for i, n := range names {
		if n == string(b) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%q is not a %s (one of %v)", b, what, names)
}

var (
	phaseNames    = []string{"starting", "running", "exited"}
	streamNames   = []string{"stdout", "stderr"}
	reasonNames   = []string{"self-exit", "stopped", "killed", "lifetime", "idle", "evicted", "removed"}
	kindNames     = []string{"exited", "log-ready", "stdin-drained"}
	overflowNames = []string{"drop-oldest", "backpressure"}
)

func (s Signal) MarshalText() ([]byte, error) { return marshalName(signalNames[:], int(s), "signal") }
func (s *Signal) UnmarshalText(b []byte) error {
	v, err := unmarshalName(signalNames[:], b, "signal")
	*s = Signal(v)
	return err
}

func (p Phase) MarshalText() ([]byte, error) { return marshalName(phaseNames, int(p), "phase") }
func (p *Phase) UnmarshalText(b []byte) error {
	v, err := unmarshalName(phaseNames, b, "phase")
	*p = Phase(v)
	return err
}

func (s LogStream) MarshalText() ([]byte, error) {
	return marshalName(streamNames, int(s), "log-stream")
}
func (s *LogStream) UnmarshalText(b []byte) error {
	v, err := unmarshalName(streamNames, b, "log-stream")
	*s = LogStream(v)
	return err
}

func (r ExitReason) MarshalText() ([]byte, error) {
	return marshalName(reasonNames, int(r), "exit-reason")
}
func (r *ExitReason) UnmarshalText(b []byte) error {
	v, err := unmarshalName(reasonNames, b, "exit-reason")
	*r = ExitReason(v)
	return err
}

func (k EventKind) MarshalText() ([]byte, error) { return marshalName(kindNames, int(k), "event-kind") }
func (k *EventKind) UnmarshalText(b []byte) error {
	v, err := unmarshalName(kindNames, b, "event-kind")
	*k = EventKind(v)
	return err
}

func (o Overflow) MarshalText() ([]byte, error) {
	return marshalName(overflowNames, int(o), "overflow-policy")
}
func (o *Overflow) UnmarshalText(b []byte) error {
	v, err := unmarshalName(overflowNames, b, "overflow-policy")
	*o = Overflow(v)
	return err
}

func (c Code) MarshalText() ([]byte, error) { return marshalName(codeNames[:], int(c), "error-code") }
func (c *Code) UnmarshalText(b []byte) error {
	v, err := unmarshalName(codeNames[:], b, "error-code")
	*c = Code(v)
	return err
}
