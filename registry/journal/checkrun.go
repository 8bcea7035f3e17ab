package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/capsule-host/capsule-host/sandbox/reexec"
)

// checkResult is what the child reported.
type checkResult struct {
	records  []dumpLine // record lines, in file order
	problems []dumpLine // structural problems (Bucket/Key say where, if known)
	buckets  []string
	busy     bool
}

// corrupt reports whether the file has structural problems.
func (r checkResult) corrupt() bool { return len(r.problems) > 0 }

// runCheck runs the checking child on path and collects its report. It
// fails only when the child could not run at all (ErrChecker); a child that
// died mid-way is a structural problem of the file it was reading.
func runCheck(path string, opts Options) (checkResult, error) {
	if os.Getenv(checkEnv) != "" {
		return checkResult{}, fmt.Errorf("%w: a journal was opened inside the journal checker: this binary's main (or TestMain) must call reexec.Init first", ErrChecker)
	}
	cmd := reexec.Command(checkRole, path, ms(opts.LockTimeout), ms(opts.CheckTimeout))
	cmd.Env = append(os.Environ(), checkEnv+"=1")
	stderr := &tail{max: 2048}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return checkResult{}, fmt.Errorf("%w: %v", ErrChecker, err)
	}
	if err := cmd.Start(); err != nil {
		return checkResult{}, fmt.Errorf("%w: starting %s: %v", ErrChecker, reexec.Self, err)
	}
	// The child bounds its own time; this is the backstop if it cannot.
	killer := time.AfterFunc(opts.CheckTimeout+5*time.Second, func() { cmd.Process.Kill() })
	defer killer.Stop()
	res, hello, done := readCheck(out)
	io.Copy(io.Discard, out)
	werr := cmd.Wait()
	switch {
	case !hello:
		return checkResult{}, fmt.Errorf("%w: the child did not answer (%v; stderr: %q): the binary's main (or TestMain) must call reexec.Init", ErrChecker, werr, stderr.String())
	case !done:
		res.problems = append(res.problems, dumpLine{Problem: fmt.Sprintf("the checker died reading the file (%v; stderr: %q)", werr, stderr.String())})
	}
	return res, nil
}

// readCheck decodes the child's lines until EOF or a line it cannot parse.
func readCheck(r io.Reader) (res checkResult, hello, done bool) {
	dec := json.NewDecoder(r)
	for {
		var l dumpLine
		if err := dec.Decode(&l); err != nil {
			return res, hello, done
		}
		switch {
		case l.Hello != "":
			hello = l.Hello == checkHello
		case l.Problem != "":
			res.problems = append(res.problems, l)
		case l.Bucket != "":
			res.records = append(res.records, l)
		}
		if l.Busy {
			res.busy = true
		}
		if l.Done {
			done, res.buckets = true, l.Buckets
		}
	}
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// tail keeps the last max bytes written to it (the child's stderr: a
// crash's last words, not its whole trace).
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// damage is a structural problem: its text, and errors.Is ErrCorrupt.
type damage string

func (d damage) Error() string { return string(d) }

func (d damage) Is(target error) bool { return target == ErrCorrupt }

// problemErr is one structural problem as a loss for the report: where
// (bucket and the last key read, if known) and what.
func problemErr(p dumpLine) *RecordError {
	return &RecordError{Bucket: p.Bucket, Key: shortKey(p.Key), Err: damage(p.Problem)}
}

// errProblems summarises structural problems as one error for
// *CorruptError.
func errProblems(ps []dumpLine) error {
	errs := make([]error, 0, len(ps))
	for _, p := range ps {
		errs = append(errs, problemErr(p))
	}
	return errors.Join(errs...)
}
